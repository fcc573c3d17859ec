"""The API gateway: the HTTP face of Parley that authenticates callers, admits debates and batches into
the job queue, streams their events and serves their results (``api.app`` builds the FastAPI app).
"""
