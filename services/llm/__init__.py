"""The LLM room: everything that reaches a chat model, behind one public surface.

What is here: the OpenAI-compatible HTTP client (``client``), its replicas and their load shared
across worker processes (``replicas``, ``replica_load``), the factory that builds each role's model
from the settings (``factory``, ``settings``), the embedded llama.cpp server and the GGUF files it
serves (``embedded``, ``gguf``, ``xllama_serve``), the packaged models as data (``registry`` over
``models.json``) and the ``parley llm`` / ``parley models`` commands (``cli``, ``models_cli``).

Other packages import the names below from ``services.llm`` (an import-linter contract keeps them off
the modules). The debate engine imports none of it: it reaches a model through the port
``services.chat_model`` (protocol, messages, typed errors), which opens no socket.
"""

from services.llm.cli import llm_app
from services.llm.client import OpenAIChatClient
from services.llm.embedded import (
    ServedModel,
    ServerKind,
    describe_model,
    embedded_from_settings,
    embedded_server,
    find_llama_server,
    resolve_model,
)
from services.llm.factory import RoleModelsFromSettings, build_role_models
from services.llm.gguf import check_servable, read_gguf
from services.llm.models_cli import models_app
from services.llm.registry import (
    ALIASES,
    MODELS,
    EmbeddedLLMError,
    GGUFModel,
    UnknownModelError,
    is_installed,
    is_model_path,
    model_identity,
    resolve_model_name,
)
from services.llm.replica_load import RedisReplicaLoad
from services.llm.replicas import REPLICA_HEALTH, ReplicaRegistry, split_base_urls
from services.llm.served_models import ModelNotServed, check_models_served
from services.llm.settings import ROLES, LLMSettings, batch_defaults
from services.llm.weights import assemble_gguf

__all__ = [
    "ALIASES",
    "MODELS",
    "REPLICA_HEALTH",
    "ROLES",
    "EmbeddedLLMError",
    "GGUFModel",
    "LLMSettings",
    "ModelNotServed",
    "OpenAIChatClient",
    "RedisReplicaLoad",
    "ReplicaRegistry",
    "RoleModelsFromSettings",
    "ServedModel",
    "ServerKind",
    "UnknownModelError",
    "assemble_gguf",
    "batch_defaults",
    "build_role_models",
    "check_models_served",
    "check_servable",
    "describe_model",
    "embedded_from_settings",
    "embedded_server",
    "find_llama_server",
    "is_installed",
    "is_model_path",
    "llm_app",
    "model_identity",
    "models_app",
    "read_gguf",
    "resolve_model",
    "resolve_model_name",
    "split_base_urls",
]
