"""nn node kinds."""
