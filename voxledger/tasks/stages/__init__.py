"""The receipt-writing stages, one module per CLI noun, as plain functions (the ``*_fn`` each flow's
task calls). Everything else under ``voxledger.tasks`` is a component they use; a component never
imports a stage (``tests/test_layers.py``)."""
