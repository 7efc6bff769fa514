"""Where a Vision Transformer's features come from: a ``timm/`` or ``hf/`` model entry's
``tokens`` and ``blocks``, read without torch (planning, weights identities, command lines).

* ``pre_logits`` (the default): timm's pooled pre-logits features, what the model's
  classifier reads; the paper's penultimate layer (supp. B.1), so CoG's published numbers.
* ``cls``: the class tokens of the last ``blocks`` blocks, each through the model's final
  norm, concatenated (``blocks`` x D wide).
* ``avgpool``: the mean of the last block's patch tokens, normalised as the model normalises
  what it pools (D wide).
* ``cls+avgpool``: both, the class tokens first ((``blocks`` + 1) x D wide).
* ``pooler_output``: a ``transformers`` model's own pooled output (``hf/`` archs only: its
  normalised class token, a CNN's normalised global mean, SigLIP's attention pool).

This is the input DINOv2's linear evaluation builds (``create_linear_input`` of
dinov2/eval/linear.py, ``n_last_blocks`` and ``avgpool``); register tokens never enter.
:mod:`imagenet_cog.models.timm_models` builds it with timm's intermediate-layer API,
:mod:`imagenet_cog.models.hf_models` from a ``transformers`` model's outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

PRE_LOGITS = "pre_logits"
CLS = "cls"
AVGPOOL = "avgpool"
CLS_AVGPOOL = "cls+avgpool"
POOLER_OUTPUT = "pooler_output"
TOKEN_CHOICES = (PRE_LOGITS, CLS, AVGPOOL, CLS_AVGPOOL, POOLER_OUTPUT)
DEFAULT_TOKENS = PRE_LOGITS
DEFAULT_BLOCKS = 1


@dataclass(frozen=True)
class TokenChoice:
    """A model entry's ``tokens`` and ``blocks``, their defaults filled."""

    tokens: str = DEFAULT_TOKENS
    blocks: int = DEFAULT_BLOCKS

    @classmethod
    def of(cls, tokens: str | None, blocks: int | None) -> "TokenChoice":
        return cls(tokens or DEFAULT_TOKENS, DEFAULT_BLOCKS if blocks is None else int(blocks))

    @property
    def is_default(self) -> bool:
        return self == TokenChoice()

    @property
    def reads_tokens(self) -> bool:
        """Whether the features are built from the blocks' tokens rather than the model's own
        pooled output (timm's head, a transformers model's pooler)."""
        return self.tokens not in (PRE_LOGITS, POOLER_OUTPUT)

    @property
    def class_tokens(self) -> bool:
        return self.tokens in (CLS, CLS_AVGPOOL)

    @property
    def patch_mean(self) -> bool:
        return self.tokens in (AVGPOOL, CLS_AVGPOOL)

    def width(self, dim: int) -> int:
        """The feature width for a network of token width ``dim`` (a pooled output's: ``dim``)."""
        if not self.reads_tokens:
            return dim
        return dim * ((self.blocks if self.class_tokens else 0) + (1 if self.patch_mean else 0))

    def problem(self) -> str | None:
        """What is wrong with the settings themselves (any network), or None."""
        if self.tokens not in TOKEN_CHOICES:
            return f"tokens must be one of {', '.join(TOKEN_CHOICES)}, not '{self.tokens}'."
        if self.blocks < 1:
            return "blocks must be a positive number of blocks."
        if self.blocks > 1 and not self.class_tokens:
            read = ("the last block alone" if self.patch_mean else
                    "the model's pooler output" if self.tokens == POOLER_OUTPUT else "timm's head")
            return (f"blocks: {self.blocks} counts the class tokens of the last blocks (tokens: {CLS} or "
                    f"{CLS_AVGPOOL}); tokens: {self.tokens} reads {read}.")
        return None

    def identity(self) -> str:
        """The weights identity's suffix: none for the default, so that its features stay current."""
        return "" if self.is_default else f"+tokens:{self.tokens}/blocks:{self.blocks}"

    def options(self) -> list[str]:
        """The extract command's options: none for the default (its command text is unchanged)."""
        return [] if self.is_default else ["--tokens", self.tokens, "--blocks", str(self.blocks)]

    def provenance(self) -> dict[str, str | int]:
        """What each shard records of the choice."""
        return {"tokens": self.tokens, "blocks": self.blocks}
