"""Example toolkits and scripted models, used by `make demo` and the docs."""
