"""Proof that two runs compute the same: ``verify`` (a model), ``compare`` (two scripts),
``testing`` (an assertion), one judge, one runner of ranks, the HTML report."""
