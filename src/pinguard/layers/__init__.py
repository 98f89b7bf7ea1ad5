"""Layer streams: verify, inflate, walk tar headers, apply whiteouts, cache per layer.

Nothing in this package knows about Python packaging: it hands the catalog the members a
selector asked for.
"""
