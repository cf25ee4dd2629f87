"""Generated from ../pulsar_api.proto by `make proto`. Do not edit."""
