"""T2T-ViT-t-14 (Yuan et al., "Tokens-to-Token ViT", ICCV 2021), the "t" (transformer) variant.

Sizes of the published ``T2t_vit_t_14`` (github yitu-opensource/T2T-ViT): a tokens-to-token
stem of two one-head token transformers (64-d tokens) between three soft splits (unfold
7/4, 3/2, 3/2), a 384-d projection, then 14 transformer blocks of 6 heads with MLP ratio 3
and no qkv bias, fixed sinusoidal position embeddings and a class token. Parameter names
follow that release (``tokens_to_token.attention{1,2}``, ``tokens_to_token.project``,
``cls_token``, ``pos_embed``, ``blocks.<i>``, ``norm``, ``head``) so its checkpoint (the EMA
weights, ``state_dict_ema``) loads as published. Features: the class token after the final
norm, 384-d (paper Table 3).
"""

from __future__ import annotations

import math

import torch
from torch import nn

EMBED_DIM = 384
DEPTH = 14
HEADS = 6
MLP_RATIO = 3.0
TOKEN_DIM = 64


def sinusoid_table(positions: int, dim: int) -> torch.Tensor:
    """The fixed sine/cosine position table of "Attention is all you need", [1, positions, dim]."""
    position = torch.arange(positions, dtype=torch.float64)[:, None]
    exponent = 2 * (torch.arange(dim) // 2).to(torch.float64) / dim
    angles = position / torch.pow(10000.0, exponent)[None, :]
    table = torch.where(torch.arange(dim) % 2 == 0, torch.sin(angles), torch.cos(angles))
    return table.to(torch.float32)[None]


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int, out: int | None = None):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, out or dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        q, k, v = self.qkv(x).reshape(batch, tokens, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        weights = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        return self.proj((weights @ v).transpose(1, 2).reshape(batch, tokens, dim))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: float):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TokenAttention(nn.Module):
    """One-head attention from ``dim``-d unfolded patches to ``out_dim``-d tokens.

    As published, the scale uses the input width and the residual adds the values.
    """

    def __init__(self, dim: int, out_dim: int):
        super().__init__()
        self.out_dim = out_dim
        self.scale = dim ** -0.5
        self.qkv = nn.Linear(dim, out_dim * 3, bias=False)
        self.proj = nn.Linear(out_dim, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        weights = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        return v + self.proj(weights @ v)


class TokenTransformer(nn.Module):
    def __init__(self, dim: int, out_dim: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = TokenAttention(dim, out_dim)
        self.norm2 = nn.LayerNorm(out_dim)
        self.mlp = Mlp(out_dim, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TokensToToken(nn.Module):
    def __init__(self, embed_dim: int, token_dim: int = TOKEN_DIM):
        super().__init__()
        self.soft_split0 = nn.Unfold(kernel_size=7, stride=4, padding=2)
        self.soft_split1 = nn.Unfold(kernel_size=3, stride=2, padding=1)
        self.soft_split2 = nn.Unfold(kernel_size=3, stride=2, padding=1)
        self.attention1 = TokenTransformer(3 * 7 * 7, token_dim)
        self.attention2 = TokenTransformer(token_dim * 3 * 3, token_dim)
        self.project = nn.Linear(token_dim * 3 * 3, embed_dim)

    @staticmethod
    def _to_map(tokens: torch.Tensor) -> torch.Tensor:
        batch, count, dim = tokens.shape
        side = math.isqrt(count)
        return tokens.transpose(1, 2).reshape(batch, dim, side, side)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attention1(self.soft_split0(x).transpose(1, 2))
        x = self.attention2(self.soft_split1(self._to_map(x)).transpose(1, 2))
        return self.project(self.soft_split2(self._to_map(x)).transpose(1, 2))


class T2TViT(nn.Module):
    """T2T-ViT returning the normalised class token; ``head`` is the ImageNet classifier."""

    def __init__(self, img_size: int = 224, embed_dim: int = EMBED_DIM, depth: int = DEPTH,
                 heads: int = HEADS, mlp_ratio: float = MLP_RATIO, num_classes: int = 1000):
        super().__init__()
        self.tokens_to_token = TokensToToken(embed_dim)
        patches = (img_size // 16) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.pos_embed = nn.Parameter(sinusoid_table(patches + 1, embed_dim), requires_grad=False)
        self.blocks = nn.ModuleList(Block(embed_dim, heads, mlp_ratio) for _ in range(depth))
        self.norm = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, num_classes) if num_classes else nn.Identity()

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.tokens_to_token(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.norm(x)[:, 0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.forward_features(x))


def t2t_vit_t_14(img_size: int = 224, num_classes: int = 1000) -> T2TViT:
    return T2TViT(img_size=img_size, num_classes=num_classes)
