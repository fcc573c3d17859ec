"""Real stand-ins for tests and benchmarks: the scripted OpenAI-compatible LLM server
(``scripted_llm``) and the process helpers (``processes``: redis-server, apps under uvicorn, Celery
workers). Importable (installed with the project) so the benchmarks need not reach into ``tests/``.
"""
