"""Commands for ``python -m libcst.tool codemod`` (see ``.libcst.codemod.yaml``)."""
