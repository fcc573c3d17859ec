"""Real stand-ins for tests and benchmarks: the scripted OpenAI-compatible LLM server
(``scripted_llm``) and the process helpers (``processes``: redis-server, apps under uvicorn, Celery
workers). Kept apart from ``tests/`` so the benchmarks need not reach into the tests; like them it
runs from a checkout and is not part of the product's wheel or image.
"""
