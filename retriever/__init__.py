"""The retrieval service: builds the Wikipedia index (dense vectors in Qdrant, BM25 in Lucene) and answers
searches and knowledge-pool requests over HTTP (``retriever.app``) or in process (``retriever.local``).

Search, pools, rerank and ingestion see the vector stores through ``retriever.store_port`` only; the
Qdrant implementations are ``retriever.passage_store``, ``retriever.vector_store`` and ``retriever.stores``.
"""
