"""Weight-scaling diagnostics of Cohen, Cont, Rossier & Xu (ICML 2021), "Scaling properties of deep residual networks".

A trained ResNet of depth ``L`` has one weight tensor per layer, ``A_0 .. A_{L-1}`` (their
``A_k^{(L)}``): ``d x d`` matrices, bias vectors, scalar depth factors ``delta_k`` or conv kernels
``(c_out, c_in, kh, kw)``. Every function takes that depth-indexed sequence (a list of tensors or
arrays, or one stacked array of shape ``(L, ...)``), computes in float64 with numpy and returns
plain floats. Norms are Frobenius (the Euclidean norm of the flattened tensor; ``|delta_k|`` for
scalars) unless ``norm="spectral"`` is asked for.

Statistics (their Table 2.2), and how each scales under Hypothesis 1, ``A_k = L^-beta Abar(k/L)``
with a smooth ``Abar``:

=====================  ======================================  =======================
statistic              definition                              Hypothesis 1
=====================  ======================================  =======================
``max_norm``           ``max_k ||A_k||``                       ``~ L^-beta``
``increment_norm``     ``L^beta max_k ||A_{k+1} - A_k||``      ``~ L^-nu`` (nu-Hoelder)
``cumsum_norm``        ``max_{k=1..L} ||sum_{j<k} A_j||``      ``~ L^(1-beta)``
``root_sum_squares``   ``sqrt(sum_k ||A_k||^2)``               ``~ L^(1/2-beta)``
=====================  ======================================  =======================

Under Hypothesis 2 the weights are increments of a rough process ``W^A`` (i.i.d. weights of
size ``L^-1/2`` are the example): the cumulative sum is a random-walk path. For i.i.d. weights of
size ``L^-gamma`` its size is ``L^(1/2-gamma)`` (bounded at ``gamma = 1/2``), not ``L^(1-gamma)``:
Step 2's reading ``beta = 1 - slope`` then gives ``gamma + 1/2``, while the maximum norm stays
``~ L^-gamma`` up to the slowly growing maximum over ``L`` draws. The root sum of squares stays
bounded when ``W^A`` has finite quadratic variation.

**Two estimators of beta.** Step 2 of Cohen et al.'s text reads ``beta`` off the cumulative-sum
norm (``1 - slope``, :data:`STEPS` ``"beta"``); their published figures read it off the maximum
norm (``-slope``, ``"max_norm_exponent"``; ``plots_fully_connected.scaling_relu_scalar_delta``
with ``["Maximum"]``, labelled "Max norm: beta"). They agree under Hypothesis 1 only: on i.i.d.
weights of size ``L^-1`` over depths 8 to 1,024 the first gives ~1.5 and the second ~1.0.
:data:`ESTIMATORS` names the two; Step 3's ``nu`` is computed with each (``"nu"`` with Step 2's
beta, ``"nu_max_norm"`` with the max norm's).

**Trend/noise split (their Step 4).** The cumulative-sum path ``S_k = sum_{j<k} A_j``,
``k = 0..L``, is split into a smooth trend (the discrete ``L^(1-beta) int_0^{k/L} Abar``) and a
residual, the noise part ``W^A``. Method: a Savitzky-Golay filter
(:func:`scipy.signal.savgol_filter`) of polynomial order :data:`TREND_POLYORDER` (2) over a
window of :data:`TREND_WINDOW_FRACTION` (10 %) of the ``L + 1`` path points (the odd length
nearest to it, at least 5 points; shorter paths, L < 4, are not split and report NaN), applied to
every coordinate of the path, with ``mode="interp"`` at both ends (a polynomial fitted to the
first and last windows). The trend is the filtered path,
``W^A`` the path minus the trend. The filter reproduces polynomials of degree <= 2 exactly, so
constant or linearly varying weights have no noise part; a random walk keeps its fluctuations
below the window scale. :func:`trend_noise_split` reports ``max_k ||W^A_k||``, the trend's
maximum and the scale-free **noise fraction** ``max_k ||W^A_k|| / max_k ||S_k||``, which stays
of order one under Hypothesis 2 and vanishes with smoother weights. (Cohen et al.'s code
subtracts a centred moving average with a window of 10 % of ``L``; a moving average is biased on
curved trends, a quadratic filter only on trends beyond degree 2.)

**Exponents (Steps 1, 2, 3, 5).** :func:`fit_power_law` regresses ``log statistic`` on
``log L`` by ordinary least squares (:func:`scipy.stats.linregress`) and gives the slope with a
two-sided Student-t interval on ``n - 2`` degrees of freedom (at least :data:`MIN_DEPTHS`
distinct depths). :data:`STEPS` turns slopes into the paper's exponents: ``alpha = -slope`` of
``max_k |delta_k|`` (Step 1), ``beta = 1 - slope`` of the cumulative-sum norm (Step 2), minus
the slope of the maximum norm (``= beta`` under Hypothesis 1), ``nu = -(beta + slope)`` of the
raw maximum increment (Step 3, the beta-scaled increment norm), the root sum of squares' slope
(Step 5) and the noise fraction's slope (Step 4); ``nu_max_norm`` is Step 3 with the max-norm beta.

**Convolutions.** :func:`conv_spectral_norms` is the largest singular value of the convolution
operator of a kernel on an ``n x n`` input with circular boundary: the 2-D DFT block-diagonalises
a circular convolution, so it is the largest singular value over the ``n^2`` frequency matrices
``Khat(u, v)`` (``c_out x c_in``) of the zero-padded kernel (Sedghi, Gupta & Long, ICLR 2019).
For the zero-padded ("same") convolutions of a CIFAR ResNet it is the standard approximation.
:func:`fold_batchnorm` folds an eval-mode BatchNorm into the conv before it.

>>> round(max_norm([np.eye(2), 2 * np.eye(2)]), 6), round(cumsum_norm([np.eye(2), -np.eye(2)]), 6)
(2.828427, 1.414214)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
from scipy import signal, stats
from torch.nn.utils.fusion import fuse_conv_bn_weights

NORMS = ("fro", "spectral")
TREND_WINDOW_FRACTION = 0.1  # window of the trend filter, as a fraction of the L + 1 path points
TREND_POLYORDER = 2  # polynomial order of the Savitzky-Golay trend filter
TREND_MIN_WINDOW = 5  # smallest filter window (points)
MIN_DEPTHS = 3  # a slope with a t interval needs n - 2 >= 1 degrees of freedom
DEFAULT_LEVEL = 0.95  # confidence level of the slope intervals

INSUFFICIENT_DEPTHS = "insufficient depths"
NON_POSITIVE = "non-positive statistic"


# ----------------------------------------------------------------------------- inputs and norms
def stack_weights(weights) -> np.ndarray:
    """The sequence ``A_0 .. A_{L-1}`` as one float64 array of shape ``(L, ...)``."""
    if isinstance(weights, torch.Tensor):
        stacked = weights.detach().cpu().double().numpy()
    elif isinstance(weights, np.ndarray):
        stacked = weights.astype(np.float64)
    else:
        items = [
            w.detach().cpu().double().numpy() if isinstance(w, torch.Tensor) else np.asarray(w, np.float64)
            for w in weights
        ]
        if not items:
            raise ValueError("an empty weight sequence has no statistics")
        stacked = np.stack(items)
    if stacked.ndim == 0 or stacked.shape[0] == 0:
        raise ValueError("give a depth-indexed sequence A_0 .. A_{L-1} with L >= 1")
    return stacked


def conv_spectral_norms(kernels, input_size: int | tuple[int, int]) -> np.ndarray:
    """Operator 2-norm of each conv kernel ``(L, c_out, c_in, kh, kw)`` on an ``input_size`` input, circular boundary.

    The largest singular value over the ``h * w`` DFT frequency matrices ``Khat(u, v) = sum_pq K[:, :, p, q]
    exp(-2 pi i (u p / h + v q / w))`` (module docstring). The sum runs over every tap, so a kernel larger
    than the feature map wraps around as the circular convolution does. ``input_size``: ``n`` or ``(h, w)``.
    """
    k = stack_weights(kernels)
    if k.ndim == 4:
        k = k[None]
    h, w = (input_size, input_size) if isinstance(input_size, int) else input_size
    rows = np.exp(-2j * np.pi * np.outer(np.arange(h), np.arange(k.shape[-2])) / h)  # (h, kh)
    cols = np.exp(-2j * np.pi * np.outer(np.arange(w), np.arange(k.shape[-1])) / w)  # (w, kw)
    matrices = np.einsum("up,vq,loipq->luvoi", rows, cols, k)  # (L, h, w, c_out, c_in)
    return np.linalg.svd(matrices, compute_uv=False)[..., 0].reshape(len(k), -1).max(axis=1)


def layer_norms(weights, norm: str = "fro", input_size: int | tuple[int, int] | None = None) -> np.ndarray:
    """``||A_k||`` for every layer, shape ``(L,)``.

    ``fro``: the Euclidean norm of the flattened tensor. ``spectral``: the largest singular value;
    for matrices the matrix 2-norm, for conv kernels that of the convolution operator
    (:func:`conv_spectral_norms`, needs ``input_size``), for vectors and scalars the Euclidean norm.
    """
    if norm not in NORMS:
        raise ValueError(f"norm {norm!r}: use one of {NORMS}")
    stacked = stack_weights(weights)
    if norm == "fro" or stacked.ndim <= 2:
        return np.sqrt((stacked.reshape(len(stacked), -1) ** 2).sum(axis=1))
    if stacked.ndim == 3:
        return np.linalg.norm(stacked, ord=2, axis=(1, 2))
    if stacked.ndim == 5:
        if input_size is None:
            raise ValueError("the spectral norm of a conv kernel needs the input_size of its feature map")
        return conv_spectral_norms(stacked, input_size)
    raise ValueError(f"no spectral norm for layer tensors of shape {stacked.shape[1:]}")


# ----------------------------------------------------------------------------- statistics (Table 2.2)
def max_norm(weights, norm: str = "fro", input_size=None) -> float:
    """``max_k ||A_k||``."""
    return float(layer_norms(weights, norm, input_size).max())


def max_increment(weights, norm: str = "fro", input_size=None) -> float:
    """``max_k ||A_{k+1} - A_k||`` (NaN when ``L < 2``)."""
    stacked = stack_weights(weights)
    if len(stacked) < 2:
        return math.nan
    return float(layer_norms(np.diff(stacked, axis=0), norm, input_size).max())


def increment_norm(weights, beta: float, norm: str = "fro", input_size=None) -> float:
    """The beta-scaled norm of increments ``L^beta max_k ||A_{k+1} - A_k||`` (Step 3)."""
    return len(stack_weights(weights)) ** beta * max_increment(weights, norm, input_size)


def cumulative_sums(weights) -> np.ndarray:
    """The path ``S_k = sum_{j<k} A_j`` for ``k = 0..L``, shape ``(L + 1, ...)`` (``S_0 = 0``)."""
    stacked = stack_weights(weights)
    return np.concatenate([np.zeros_like(stacked[:1]), np.cumsum(stacked, axis=0)])


def cumsum_norm(weights, norm: str = "fro", input_size=None) -> float:
    """``max_{k=1..L} ||sum_{j<k} A_j||`` (Step 2)."""
    return float(layer_norms(cumulative_sums(weights)[1:], norm, input_size).max())


def root_sum_squares(weights, norm: str = "fro", input_size=None) -> float:
    """``sqrt(sum_k ||A_k||^2)`` (Step 5)."""
    return float(np.sqrt((layer_norms(weights, norm, input_size) ** 2).sum()))


# ----------------------------------------------------------------------------- trend / noise (Step 4)
def trend_window(points: int, fraction: float = TREND_WINDOW_FRACTION, polyorder: int = TREND_POLYORDER) -> int | None:
    """Odd filter window for a path of ``points`` points: nearest to ``fraction * points``, at least
    :data:`TREND_MIN_WINDOW`, at most ``points``; None when the path is too short to leave the fit any
    freedom (a window of ``polyorder + 1`` points interpolates: no noise part by construction)."""
    window = max(round(fraction * points), TREND_MIN_WINDOW, polyorder + 2)
    window += 1 - window % 2  # odd
    if window > points:
        window = points - 1 + points % 2  # the largest odd length that fits
    return window if window > polyorder + 1 else None


@dataclass(frozen=True)
class TrendNoise:
    """The cumulative-sum path split into trend + noise ``W^A`` (module docstring, Step 4)."""

    path: np.ndarray  # S_0 .. S_L, shape (L + 1, ...)
    trend: np.ndarray
    noise: np.ndarray  # W^A = path - trend
    window: int | None  # filter window in points (None: path too short, no noise part)

    def norms(self, part: str, norm: str = "fro", input_size=None) -> np.ndarray:
        """``||part_k||`` for ``k = 0..L`` (``part``: "path", "trend" or "noise")."""
        return layer_norms(getattr(self, part), norm, input_size)

    def summary(self, norm: str = "fro", input_size=None) -> dict:
        """``path_max = max_k ||S_k||`` (the cumulative-sum norm), ``noise_max = max_k ||W^A_k||``,
        ``trend_max`` and ``noise_fraction = noise_max / path_max`` (NaN when the path is too short to split)."""
        path_max = float(self.norms("path", norm, input_size).max())
        if self.window is None:
            return {
                "path_max": path_max,
                "noise_max": math.nan,
                "trend_max": math.nan,
                "noise_fraction": math.nan,
                "trend_window": None,
            }
        noise_max = float(self.norms("noise", norm, input_size).max())
        return {
            "path_max": path_max,
            "noise_max": noise_max,
            "trend_max": float(self.norms("trend", norm, input_size).max()),
            "noise_fraction": noise_max / path_max if path_max > 0 else math.nan,
            "trend_window": self.window,
        }


def trend_noise_split(weights, fraction: float = TREND_WINDOW_FRACTION, polyorder: int = TREND_POLYORDER) -> TrendNoise:
    """Split ``S_k = sum_{j<k} A_j`` into a Savitzky-Golay trend and the noise ``W^A`` (module docstring)."""
    path = cumulative_sums(weights)
    window = trend_window(len(path), fraction, polyorder)
    if window is None:
        trend = path.copy()
    else:
        trend = signal.savgol_filter(path, window, polyorder, axis=0, mode="interp")
    return TrendNoise(path=path, trend=trend, noise=path - trend, window=window)


def weight_statistics(weights, norm: str = "fro", input_size=None, *, trend_noise: bool = True) -> dict:
    """Every per-depth statistic of one sequence: ``depth`` (L), ``max_norm``, ``max_increment``
    (unscaled: the beta-scaled norm is ``L^beta`` times it), ``cumsum_norm``, ``root_sum_squares``,
    and with ``trend_noise`` the split's ``noise_max``, ``trend_max``, ``noise_fraction``, ``trend_window``."""
    stacked = stack_weights(weights)
    norms = layer_norms(stacked, norm, input_size)
    stats = {
        "depth": len(stacked),
        "max_norm": float(norms.max()),
        "max_increment": max_increment(stacked, norm, input_size),
        "root_sum_squares": float(np.sqrt((norms**2).sum())),
    }
    if not trend_noise:
        return {**stats, "cumsum_norm": cumsum_norm(stacked, norm, input_size)}
    split = trend_noise_split(stacked).summary(norm, input_size)
    return {**stats, "cumsum_norm": split.pop("path_max"), **split}


# ----------------------------------------------------------------------------- log-log regressions
class FitUnavailable(ValueError):
    """No power law can be fitted; ``status`` is :data:`INSUFFICIENT_DEPTHS` or :data:`NON_POSITIVE`."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status


@dataclass(frozen=True)
class PowerLawFit:
    """``log statistic = intercept + slope * log L`` by least squares, with a t interval of the slope."""

    slope: float
    intercept: float
    stderr: float  # standard error of the slope
    ci_low: float
    ci_high: float
    level: float
    n: int  # number of (depth, value) points
    n_depths: int  # distinct depths among them
    depth_min: int
    depth_max: int
    r_squared: float

    def as_record(self) -> dict:
        return asdict(self)


def fit_power_law(depths: Sequence[float], values: Sequence[float], level: float = DEFAULT_LEVEL) -> PowerLawFit:
    """Slope of ``log values`` against ``log depths`` with a two-sided ``level`` Student-t interval.

    Raises :class:`FitUnavailable` with fewer than :data:`MIN_DEPTHS` distinct depths or when a
    value is zero, negative or not finite (its logarithm does not exist).
    """
    x = np.asarray(depths, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"depths and values must be two 1-D sequences of one length, got {x.shape} and {y.shape}")
    distinct = len(np.unique(x))
    if distinct < MIN_DEPTHS:
        raise FitUnavailable(INSUFFICIENT_DEPTHS, f"{distinct} distinct depths, a fit needs at least {MIN_DEPTHS}")
    if not (np.all(np.isfinite(y)) and np.all(y > 0)) or not np.all(x > 0):
        raise FitUnavailable(NON_POSITIVE, "a value is zero, negative or not finite; log-log fit undefined")
    fit = stats.linregress(np.log(x), np.log(y))
    half = float(stats.t.ppf(0.5 + level / 2, len(x) - 2)) * fit.stderr
    return PowerLawFit(
        slope=float(fit.slope),
        intercept=float(fit.intercept),
        stderr=float(fit.stderr),
        ci_low=float(fit.slope - half),
        ci_high=float(fit.slope + half),
        level=level,
        n=len(x),
        n_depths=distinct,
        depth_min=int(x.min()),
        depth_max=int(x.max()),
        r_squared=float(fit.rvalue**2),
    )


@dataclass(frozen=True)
class Step:
    """An exponent read off a slope: ``exponent = offset + sign * slope`` (``offset`` may name another exponent)."""

    statistic: str  # key of weight_statistics()
    sign: float
    offset: float | str  # a number, or minus an exponent fitted before ("-beta" for nu, "-max_norm_exponent")
    rule: str
    meaning: str


STEPS: dict[str, Step] = {
    "alpha": Step("max_norm", -1.0, 0.0, "-slope", "Step 1: delta ~ L^-alpha, from max_k |delta_k|"),
    "beta": Step("cumsum_norm", -1.0, 1.0, "1 - slope", "Step 2: the cumulative-sum norm grows like L^(1-beta)"),
    "max_norm_exponent": Step("max_norm", -1.0, 0.0, "-slope", "max_k ||A_k|| ~ L^-beta under Hypothesis 1"),
    "nu": Step(
        "max_increment", -1.0, "-beta", "-(beta + slope)", "Step 3: L^beta max_k ||A_k+1 - A_k|| ~ L^-nu, Step 2's beta"
    ),
    "nu_max_norm": Step(
        "max_increment",
        -1.0,
        "-max_norm_exponent",
        "-(beta_max + slope)",
        "Step 3: L^beta max_k ||A_k+1 - A_k|| ~ L^-nu, the max norm's beta",
    ),
    "rss_slope": Step("root_sum_squares", 1.0, 0.0, "slope", "Step 5: sqrt(sum_k ||A_k||^2) bounded when <= 0"),
    "noise_fraction_slope": Step(
        "noise_fraction", 1.0, 0.0, "slope", "Step 4: ~0 under Hypothesis 2, < 0 for smooth weights"
    ),
}


STEP2_ESTIMATOR = "Step 2 (cumulative sum, their text)"
MAX_NORM_ESTIMATOR = "max norm (how their figures were read; used for the verdict)"
ESTIMATORS = {
    "beta": STEP2_ESTIMATOR,
    "nu": STEP2_ESTIMATOR,
    "max_norm_exponent": MAX_NORM_ESTIMATOR,
    "nu_max_norm": MAX_NORM_ESTIMATOR,
}  # which beta an exponent rests on (module docstring)


def exponent(fit: PowerLawFit, sign: float, offset: float) -> tuple[float, float, float]:
    """``(estimate, ci_low, ci_high)`` of ``offset + sign * slope`` (the interval of the slope, mapped)."""
    ends = sorted((offset + sign * fit.ci_low, offset + sign * fit.ci_high))
    return offset + sign * fit.slope, ends[0], ends[1]


def joint_exponent(
    depths: Sequence[float],
    values: Sequence[float],
    beta_values: Sequence[float],
    step: Step,
    beta_step: Step,
    level: float = DEFAULT_LEVEL,
) -> tuple[PowerLawFit, tuple[float, float, float]]:
    """An exponent that needs a fitted beta (Step 3's ``nu``), with beta's uncertainty: one joint least-squares fit.

    ``nu = -beta + sign * s`` with ``s`` the slope of ``log values`` and ``beta = b0 + b_sign * s_b``, ``s_b`` the
    slope of ``log beta_values`` over the same depths. With one design (``log L``) for both regressions, OLS is
    linear in the response, so ``sign * s - b_sign * s_b`` is exactly ``sign`` times the slope of
    ``log(values * beta_values^(-b_sign / sign))``; that regression's residuals are the combination of both
    statistics' residuals, so its Student-t interval (``n - 2`` degrees of freedom) carries beta's variance and its
    covariance with ``s`` (the delta method with the residual covariance gives the same standard error exactly).
    Returns the joint fit and ``(estimate, ci_low, ci_high)`` of the exponent; the estimate equals
    ``-beta_hat + sign * s_hat`` of the two separate fits.
    """
    if isinstance(beta_step.offset, str) or step.offset != "-" + _step_name(beta_step):
        raise ValueError(f"{step.rule}: joint_exponent wants an exponent offset by minus the beta of {beta_step.rule}")
    weight = -beta_step.sign / step.sign
    combined = np.asarray(values, dtype=np.float64) * np.asarray(beta_values, dtype=np.float64) ** weight
    fit = fit_power_law(depths, combined, level)
    return fit, exponent(fit, step.sign, -float(beta_step.offset))


def _step_name(step: Step) -> str:
    return next(name for name, s in STEPS.items() if s is step)


# ----------------------------------------------------------------------------- BatchNorm folding
def fold_batchnorm(
    weight: torch.Tensor,
    *,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    gamma: torch.Tensor,
    beta: torch.Tensor,
    eps: float,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W', b')`` with ``conv_{W', b'} = BN_eval o conv_{W, b}``: ``W' = W * gamma / sqrt(var + eps)`` per output channel,
    ``b' = beta + (b - mean) * gamma / sqrt(var + eps)``.

    Torch's own folding (:func:`torch.nn.utils.fusion.fuse_conv_bn_weights`, the one ``torch.fx`` fusion
    uses), with the BatchNorm's tensors passed by name; plain tensors come back (no autograd).
    """
    folded_weight, folded_bias = fuse_conv_bn_weights(weight, bias, running_mean, running_var, eps, gamma, beta)
    return folded_weight.detach(), folded_bias.detach()
