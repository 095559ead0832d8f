"""quant node kinds."""
