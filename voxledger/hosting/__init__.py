"""Where flows run: the home's long-lived Prefect server (``server``), the Prefect session an entry
point wraps a flow in and the one function that runs a flow in this process (``runtime``), and
the home's resident flow runner (``runner``).

Hosting names a flow by its dotted path (``"voxledger.flows.audit:audit"``) and imports it only
to run it; flows never import hosting, and hosting never imports the CLI. Importing this package
changes nothing.
"""
