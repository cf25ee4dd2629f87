"""Durability and robustness of a real standalone: crashes and hostile input."""
