"""The embedded offline model: a GGUF file assembled from PyPI packages, served by llama.cpp on loopback."""
