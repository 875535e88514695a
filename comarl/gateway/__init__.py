"""An OpenAI-compatible endpoint over a team's generator: programs train through it, trained teams are served
by it (``comarl serve``). Needs the ``gateway`` extra (``pip install comarl[gateway]``: fastapi, uvicorn, openai).

``app.py`` (routes, one request's life), ``requests.py`` (what each field does), ``chat.py`` (chat template,
tool calls), ``batcher.py`` (concurrent requests -> one generate call), ``episodes.py`` (one record per program
run), ``server.py`` (uvicorn in a thread), ``serve.py`` (``comarl serve``).
"""
from .app import Gateway, build_app
from .episodes import Call, Episode, Episodes
from .errors import GatewayError
from .server import GatewayServer

__all__ = ["Call", "Episode", "Episodes", "Gateway", "GatewayError", "GatewayServer", "build_app"]
