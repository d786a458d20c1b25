"""The ``gsr-train`` subcommands that prepare data (``build-index``, ``supervision``, ``embed``,
``make-synthetic`` and the LLM data steps): one module each with a ``main(argv)``. The scripts in
``data_prep/`` call these, so their old command lines keep working."""
