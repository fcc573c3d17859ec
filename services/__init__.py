"""What several of Parley's processes share, in rooms with one purpose each: the LLM room (``llm``),
the job store (``jobstore``), observability (``observability``) and the settings base (``settings``),
beside small port modules the layers above depend on (``chat_model``, ``knowledge``, ``errors``)."""
