"""The claim registry: ``claims.toml`` is the single source of truth at run time.

``CLAIMS_PATH`` is the registry shipped with the package and ``ARTICLE_PATH``
the source article (``从注意力机制到 Transformer``) whose sentences the
claims quote.
"""
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLAIMS_PATH = HERE / "claims.toml"
ARTICLE_PATH = HERE / "article.zh.txt"

__all__ = ["CLAIMS_PATH", "ARTICLE_PATH"]
