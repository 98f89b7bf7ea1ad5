"""Build files read as data: Dockerfile parsing, shell words, pip/uv command lines, image
history entries and the lint rules over them. Parsers only: nothing here audits an image
(the in-build guard that does is `pinguard.guard`)."""
