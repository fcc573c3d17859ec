"""The debate engine: it runs one question through one debate protocol over a knowledge pool and
returns the whole record, with no process, queue or HTTP server of its own.

Its core (``config``, ``runner``, ``context``, ``result`` and the rest outside ``protocols``) knows
no protocol: each protocol lives in ``engine.protocols`` and plugs in through ``engine.registry``.
"""
