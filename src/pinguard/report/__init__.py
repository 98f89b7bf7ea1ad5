"""Reports: every output format of audit, lint and gate, and the one SARIF builder.

Each audit format is a module whose ``render(result, options) -> str`` follows the
``Renderer`` protocol of ``options`` (one ``RenderOptions`` for every format) and is listed
in ``formats.FORMATS``; ``sarif`` builds the SARIF logs of all three commands; ``lint``
renders lint findings.
"""
