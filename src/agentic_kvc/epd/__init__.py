"""Encoder-cache transfer for encode/prefill/decode (EPD) disaggregation."""
