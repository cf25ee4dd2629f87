"""Fakes and helpers worth sharing between tests: free ports, server processes, faults."""
