"""The scorer network both learned recipes train, in torch: imitation of a look-ahead teacher, then MaskablePPO.

The candidate policy scores candidate batches (``rlsched.agents.pick_train``), the learned
router scores replicas (``rlsched.agents.router_train``); the defaults are the candidate
policy's dimensions. ``CandidateNet`` is the network ``rlsched.learned.scorer.FrozenScorer`` runs in numpy: a
global embedding g = tanh(Wg · queue features), then per candidate a shared two-layer tanh
MLP over [candidate features, g] and a linear score — one logit per candidate, so the
policy is permutation-equivariant and any K works. ``CandidateActorCritic`` puts it inside
sb3-contrib's ``MaskableActorCriticPolicy`` (masking invalid candidates is the library's
job): the action head reads the logits straight from the features; the value head reads
the pooled per-candidate activations and the queue features.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from rlsched.learned.observation import GLOBAL_DIM
from rlsched.learned.pick import F, K

G_OUT, HIDDEN = 32, 64


class CandidateNet(nn.Module):
    """``f_dim`` candidate fields (field 1 flags the proposal); the learned router uses the same
    network over replicas (``rlsched.learned.router``)."""

    def __init__(self, g_dim: int = GLOBAL_DIM, g_out: int = G_OUT, hidden: int = HIDDEN, f_dim: int = F) -> None:
        super().__init__()
        self.glob = nn.Linear(g_dim, g_out)
        self.hidden = nn.ModuleList([nn.Linear(f_dim + g_out, hidden), nn.Linear(hidden, hidden)])
        self.out = nn.Linear(hidden, 1)
        self.proposal_bias = nn.Parameter(torch.zeros(1))
        """Added to the proposal's score: another candidate starts only when its predicted
        advantage exceeds this margin (set on validation seeds, then trainable by PPO)."""

    def forward(self, g: torch.Tensor, cand: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores (B, K) and per-candidate activations (B, K, hidden)."""
        ge = torch.tanh(self.glob(g))
        x = torch.cat([cand, ge.unsqueeze(1).expand(-1, cand.shape[1], -1)], dim=-1)
        for layer in self.hidden:
            x = torch.tanh(layer(x))
        return self.out(x).squeeze(-1) + self.proposal_bias * cand[..., 1], x

    def tensors(self) -> dict[str, np.ndarray]:
        return {k: v.detach().cpu().numpy().astype(np.float32).reshape(v.shape or (1,))
                for k, v in self.state_dict().items()}


def split(obs: torch.Tensor, g_dim: int = GLOBAL_DIM, k: int = K, f_dim: int = F) -> tuple[torch.Tensor, torch.Tensor]:
    return obs[:, :g_dim], obs[:, g_dim:].reshape(-1, k, f_dim)


def _extractor_class(g_dim: int, k: int, f_dim: int) -> Any:
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    class CandidateExtractor(BaseFeaturesExtractor):
        """Features = [k logits | pooled activations | global features]."""

        def __init__(self, observation_space: Any) -> None:
            super().__init__(observation_space, features_dim=k + HIDDEN + g_dim)
            self.net = CandidateNet(g_dim=g_dim, f_dim=f_dim)

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            g, cand = split(obs, g_dim, k, f_dim)
            logits, h = self.net(g, cand)
            valid = cand[..., 0:1]
            pooled = (h * valid).sum(1) / valid.sum(1).clamp(min=1.0)
            return torch.cat([logits, pooled, g], dim=1)

    return CandidateExtractor


def policy_class(g_dim: int = GLOBAL_DIM, k: int = K, f_dim: int = F) -> Any:
    """The actor-critic over ``k`` candidates of ``f_dim`` fields and ``g_dim`` global features
    (defaults: the candidate policy's; the learned router passes its own)."""
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

    class Logits(nn.Module):
        def forward(self, latent: torch.Tensor) -> torch.Tensor:
            return latent[:, :k]

    class CandidateActorCritic(MaskableActorCriticPolicy):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.update(features_extractor_class=_extractor_class(g_dim, k, f_dim),
                          net_arch={"pi": [], "vf": [64, 64]}, activation_fn=nn.Tanh, ortho_init=False)
            super().__init__(*args, **kwargs)

        def _build(self, lr_schedule: Any) -> None:
            super()._build(lr_schedule)
            self.action_net = Logits()  # the scores are the logits: no dense layer mixing candidates
            make: Callable[..., torch.optim.Optimizer] = self.optimizer_class  # Adam & co. take lr
            self.optimizer = make(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    return CandidateActorCritic


# ------------------------------------------------------------------ imitation
ADVANTAGE_CLIP = 10.0
"""Label advantages are clipped to ±10 class-weighted requests (a few forks drain very differently)."""


def advantages(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q(candidate) − Q(proposal), and the mask of the valid alternatives (slot 0 excluded)."""
    mask = np.isfinite(q)
    mask[:, 0] = False
    return np.clip(np.nan_to_num(q - q[:, :1], nan=0.0), -ADVANTAGE_CLIP, ADVANTAGE_CLIP), mask


def imitate(net: CandidateNet, labels: dict[str, np.ndarray], epochs: int, lr: float, weight_decay: float,
            seed: int, log: Any = None, tag: str = "imitation") -> dict[str, float]:
    """Regress score(candidate) − score(proposal) on the label advantage (mean squared error);
    10 % of the labelled episodes' states held out.

    Why not cross-entropy to softmax(Q/tau), as first designed: a hindsight label is one sample
    of Q (one future), with a spread of ~4 requests against mean advantages below 1; a
    classifier on such targets leaves the proposal in ~58 % of states and lost 2-6 points on
    validation seeds (default, x1.25-1.5). A regression estimates the mean advantage, and the
    proposal margin keeps the policy on the heuristic unless an alternative is clearly better."""
    torch.manual_seed(seed)
    adv, mask = advantages(labels["q"])
    n = len(adv)
    order = np.random.default_rng(seed).permutation(n)
    hold, train = order[: max(1, n // 10)], order[max(1, n // 10):]
    g, c = torch.as_tensor(labels["glob"]), torch.as_tensor(labels["cand"])
    at, mt = torch.as_tensor(adv, dtype=torch.float32), torch.as_tensor(mask)
    params = [p for name, p in net.named_parameters() if name != "proposal_bias"]
    opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    stats: dict[str, float] = {}
    for epoch in range(epochs):
        rng = np.random.default_rng(seed + epoch)
        for idx in np.array_split(rng.permutation(train), max(1, len(train) // 256)):
            scores, _ = net(g[idx], c[idx])
            pred = scores - scores[:, :1]
            loss = ((pred - at[idx]) ** 2 * mt[idx]).sum() / mt[idx].sum().clamp(min=1)
            opt.zero_grad()
            loss.backward()
            opt.step()
        stats = evaluate_labels(net, labels, hold)
        if log is not None:
            for k, v in stats.items():
                log.add_scalar(f"{tag}/{k}", v, epoch)
    return stats


def evaluate_labels(net: CandidateNet, labels: dict[str, np.ndarray], idx: np.ndarray) -> dict[str, float]:
    """On held-out states: advantage MSE (and that of predicting 0), agreement with the
    teacher's argmax, regret against it, and label value gained over the proposal by the
    network's pick (with its current proposal margin)."""
    q = labels["q"][idx]
    adv, mask = advantages(q)
    with torch.no_grad():
        scores, _ = net(torch.as_tensor(labels["glob"][idx]), torch.as_tensor(labels["cand"][idx]))
    s = scores.numpy()
    pred = s - s[:, :1]
    valid = np.isfinite(q)
    pick = np.where(valid, s, -np.inf).argmax(1)
    best = np.where(valid, q, -np.inf).argmax(1)
    rows = np.arange(len(q))
    denom = max(int(mask.sum()), 1)
    return {"advantage_mse": float(((pred - adv) ** 2 * mask).sum() / denom),
            "zero_mse": float((adv ** 2 * mask).sum() / denom),
            "agreement": float((pick == best).mean()), "regret": float((q[rows, best] - q[rows, pick]).mean()),
            "gain_over_proposal": float((q[rows, pick] - q[:, 0]).mean()), "deviate": float((pick != 0).mean())}


def numpy_scorer(net: CandidateNet) -> Any:
    """The same forward pass as the frozen checkpoint, without a round trip through disk."""
    from rlsched.learned.scorer import FrozenScorer

    t = net.tensors()
    pair = lambda n: (t[f"{n}.weight"], t[f"{n}.bias"])  # noqa: E731
    return FrozenScorer(pair("glob"), (pair("hidden.0"), pair("hidden.1")), pair("out"),
                        float(t["proposal_bias"][0]), {})

