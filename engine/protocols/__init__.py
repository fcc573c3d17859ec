"""The debate protocols of the literature, one package each (runner, prompts in each style, state,
settings), listed in ``engine.registry``; ``common`` holds what several of them share."""
