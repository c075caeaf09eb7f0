"""The one model of the program that every rule queries, computed once per run: the run's
modules and the imports between them as Python resolves them (``modules``), and which
programs each file runs in (``programs``)."""
