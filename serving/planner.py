"""The capacity planner: how many replicas and GPUs an inference deployment needs for a request
rate, from one replica's measured throughput (README "Serving: capacity planner").

Pure arithmetic, no I/O: the API and the page price the plan (``serving.pricing``) and call
:func:`plan`. The arithmetic is exact (fractions of the decimal inputs), so a bound of exactly 2
replicas rounds up to 2, never to 3 through a float's last digit; the answer's figures are floats.

Three lower bounds, the largest decides:

1. throughput: λ × output tokens ÷ a replica's output tokens/s;
2. concurrency (Little's law): in flight C = λ × response time, the response time being output
   tokens ÷ (tokens/s ÷ max concurrency); replicas = C ÷ max concurrency;
3. KV cache: ⌈C⌉ requests × (input + output tokens) ÷ a replica's KV-cache tokens.

With the throughput measured at the replica's max concurrency, 1 and 2 are the same number
(C ÷ concurrency = λ × output ÷ tokens/s); both are shown, as the second also gives the response
time and the slots in use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, localcontext
from fractions import Fraction

# A month of 730 hours (8,760 h a year ÷ 12), as cloud price lists count it.
HOURS_PER_MONTH = 730

Number = int | float | Decimal
DECIMAL_DIGITS = 80

# Each input's bounds: (smallest, whether the smallest is allowed, largest). The largest keep
# every figure of the answer a finite float; the smallest throughput keeps the division sane.
LIMITS: dict[str, tuple[Number, bool, Number]] = {
    "request_rate": (0, True, 1_000_000),
    "input_tokens": (0, True, 10_000_000),
    "output_tokens": (0, False, 10_000_000),
    "replica_throughput_tokens_per_second": (Decimal("0.001"), True, 1_000_000_000),
    "replica_max_concurrency": (1, True, 1_000_000),
    "kv_cache_tokens": (1, True, 10**12),
    "headroom": (0, True, 10),
    "spare_replicas": (0, True, 100_000),
    "tensor_parallel": (1, True, 1024),
    "latency_target_seconds": (0, False, 1_000_000),
    "price_per_gpu_hour": (0, True, 10**9),
}
WHOLE_NUMBERS = frozenset(
    {"replica_max_concurrency", "kv_cache_tokens", "spare_replicas", "tensor_parallel"}
)


class PlanError(ValueError):
    """Inputs the planner cannot use: ``errors`` maps each one's name (the API's field name) to
    the reason."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{field}: {reason}" for field, reason in errors.items()))
        self.errors = errors


class _Refused(ValueError):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class PlanInput:
    """What the plan is for. Token counts are means per request; the throughput is output
    tokens per second of one replica serving ``replica_max_concurrency`` requests at once."""

    request_rate: Number
    input_tokens: Number
    output_tokens: Number
    replica_throughput_tokens_per_second: Number
    replica_max_concurrency: int
    kv_cache_tokens: int
    headroom: Number = 0
    spare_replicas: int = 0
    tensor_parallel: int = 1
    latency_target_seconds: Number | None = None
    price_per_gpu_hour: Number | None = None
    currency: str = ""


@dataclass(frozen=True)
class Plan:
    """The answer. ``replicas_by_*`` are the three fractional lower bounds; ``replicas`` the
    largest × (1 + headroom), rounded up, plus the spares. ``kv_fits``: the busiest of the
    ⌈replicas by concurrency⌉ replicas (at least one), holding ⌈⌈C⌉ ÷ n⌉ whole requests of
    input + output tokens each, has room for them in its KV cache. ``slot_utilization`` is None
    when no replica is needed (λ = 0); ``cost_per_month`` and ``currency`` None without a price;
    ``meets_latency_target`` None without a target."""

    replicas_by_throughput: float
    replicas_by_concurrency: float
    replicas_by_kv_cache: float
    deciding_bounds: tuple[str, ...]
    concurrent_requests: float
    response_seconds: float
    meets_latency_target: bool | None
    slot_utilization: float | None
    kv_tokens_needed: int
    kv_tokens_busiest_replica: int
    kv_cache_tokens: int
    kv_fits: bool
    replicas_before_spares: int
    replicas: int
    gpus: int
    price_per_gpu_hour: Decimal | None
    cost_per_month: Decimal | None
    currency: str | None
    steps: tuple[str, ...]


def _exact(field: str, value: Number) -> Fraction:
    """``value`` as an exact fraction (a float as its shortest decimal: 0.1 is 1/10)."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise _Refused("must be a number")
    if isinstance(value, int):
        return Fraction(value)
    decimal = Decimal(repr(value)) if isinstance(value, float) else value
    if not decimal.is_finite():
        raise _Refused("must be a finite number")
    return Fraction(decimal)


def _checked(field: str, value: Number) -> Fraction:
    smallest, inclusive, largest = LIMITS[field]
    exact = _exact(field, value)
    if field in WHOLE_NUMBERS and exact.denominator != 1:
        raise _Refused("must be a whole number")
    low = _exact(field, smallest)
    if exact < low or (exact == low and not inclusive):
        relation = "at least" if inclusive else "more than"
        raise _Refused(f"must be {relation} {_show(low, 6)}")
    if exact > largest:
        raise _Refused(f"must be at most {_show(Fraction(largest))}")
    return exact


def _show(value: Fraction | int, places: int = 2) -> str:
    """A figure for the steps: whole numbers with thousands separators, others to ``places``
    decimals without trailing zeros (0.5, 1.45, 11.6)."""
    if isinstance(value, int) or value.denominator == 1:
        return f"{int(value):,}"
    text = f"{_decimal(value, places):,}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _listed(names: tuple[str, ...]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _replicas(value: Fraction) -> str:
    return f"{_show(value)} replica{'' if value == 1 else 's'}"


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def check(field: str, value: Number) -> None:
    """:class:`PlanError` naming ``field`` when ``value`` is outside its ``LIMITS``: the API and
    the page check each field with it as they read it, so every bad field is named at once."""
    try:
        _checked(field, value)
    except _Refused as refused:
        raise PlanError({field: refused.reason}) from None


def _read(given: PlanInput) -> dict[str, Fraction]:
    """Every input given, exact and checked against ``LIMITS``; :class:`PlanError` naming each
    one out of its bounds."""
    values: dict[str, Fraction] = {}
    errors: dict[str, str] = {}
    for field in LIMITS:
        raw = getattr(given, field)
        if raw is None:  # the optional latency target and price
            continue
        try:
            values[field] = _checked(field, raw)
        except _Refused as refused:
            errors[field] = refused.reason
    if errors:
        raise PlanError(errors)
    return values


def plan(given: PlanInput) -> Plan:
    """The plan for ``given``; :class:`PlanError` naming every input out of its bounds."""
    values = _read(given)
    rate = values["request_rate"]
    tokens_in = values["input_tokens"]
    tokens_out = values["output_tokens"]
    throughput = values["replica_throughput_tokens_per_second"]
    slots = int(values["replica_max_concurrency"])
    kv_cache = int(values["kv_cache_tokens"])
    headroom = values["headroom"]
    spares = int(values["spare_replicas"])
    tensor_parallel = int(values["tensor_parallel"])
    target = values.get("latency_target_seconds")
    price = values.get("price_per_gpu_hour")
    steps: list[str] = []

    # 1. Throughput.
    demand = rate * tokens_out
    by_throughput = demand / throughput
    steps.append(
        f"By throughput: {_show(rate)} req/s × {_show(tokens_out)} output tokens = "
        f"{_show(demand)} tokens/s ÷ {_show(throughput)} tokens/s per replica = "
        f"{_replicas(by_throughput)}."
    )

    # 2. Concurrency, by Little's law.
    per_request = throughput / slots
    response = tokens_out / per_request
    in_flight = rate * response
    by_concurrency = in_flight / slots
    meets = None if target is None else response <= target
    line = (
        f"By concurrency (Little's law): each request streams at {_show(throughput)} ÷ "
        f"{slots:,} = {_show(per_request)} tokens/s, so a response takes {_show(tokens_out)} ÷ "
        f"{_show(per_request)} = {_show(response, 1)} s; in flight C = {_show(rate)} req/s × "
        f"{_show(response, 1)} s = {_show(in_flight, 1)} requests ÷ {slots:,} per replica = "
        f"{_replicas(by_concurrency)}."
    )
    if target is not None:
        line += (
            f" That meets the {_show(target, 1)} s response-time target."
            if meets
            else f" That misses the {_show(target, 1)} s response-time target: a replica at "
            f"{slots:,} requests at once answers in {_show(response, 1)} s."
        )
    steps.append(line)

    # 3. KV cache: every in-flight request holding its whole context (input + output).
    whole_in_flight = math.ceil(in_flight)
    context = tokens_in + tokens_out
    kv_needed = math.ceil(whole_in_flight * context)
    by_kv = Fraction(kv_needed, kv_cache)
    concurrency_replicas = max(math.ceil(by_concurrency), 1)
    busiest = math.ceil(Fraction(whole_in_flight, concurrency_replicas))
    kv_busiest = math.ceil(busiest * context)
    kv_fits = kv_busiest <= kv_cache
    steps.append(
        _kv_step(in_flight, tokens_in, tokens_out, kv_cache, by_kv, concurrency_replicas, busiest)
    )

    # 4. The largest bound, with headroom, rounded up, plus spares.
    bounds = {"throughput": by_throughput, "concurrency": by_concurrency, "KV cache": by_kv}
    largest = max(bounds.values())
    deciding = tuple(name for name, value in bounds.items() if value == largest)
    padded = largest * (1 + headroom)
    before_spares = math.ceil(padded)
    replicas = before_spares + spares
    steps.append(
        f"Largest bound: {_show(largest)} ({_listed(deciding)}) × (1 + {_show(headroom)} "
        f"headroom) = {_show(padded)} → {_plural(before_spares, 'replica')}, + "
        f"{_plural(spares, 'spare')} = {_plural(replicas, 'replica')}."
    )

    # 5. GPUs.
    gpus = replicas * tensor_parallel
    steps.append(
        f"GPUs: {_plural(replicas, 'replica')} × tensor-parallel {tensor_parallel:,} = "
        f"{_plural(gpus, 'GPU')}."
    )

    # 6. Slot utilization on the replicas concurrency asks for.
    concurrency_whole = math.ceil(by_concurrency)
    slots_offered = concurrency_whole * slots
    utilization = None if slots_offered == 0 else in_flight / slots_offered
    if utilization is None:
        steps.append("Slot utilization: no request in flight, no replica needed for it.")
    else:
        steps.append(
            f"Slot utilization: {_show(in_flight, 1)} ÷ ({_plural(concurrency_whole, 'replica')} × "
            f"{slots:,} slots) = {_show(utilization * 100, 0)} %."
        )

    # 7. Cost.
    cost = None if price is None else _money(gpus * price * HOURS_PER_MONTH)
    steps.append(_cost_step(gpus, price, given.currency, cost))

    return Plan(
        replicas_by_throughput=float(by_throughput),
        replicas_by_concurrency=float(by_concurrency),
        replicas_by_kv_cache=float(by_kv),
        deciding_bounds=deciding,
        concurrent_requests=float(in_flight),
        response_seconds=float(response),
        meets_latency_target=meets,
        slot_utilization=None if utilization is None else float(utilization),
        kv_tokens_needed=kv_needed,
        kv_tokens_busiest_replica=kv_busiest,
        kv_cache_tokens=kv_cache,
        kv_fits=kv_fits,
        replicas_before_spares=before_spares,
        replicas=replicas,
        gpus=gpus,
        price_per_gpu_hour=None if price is None else _money(price, places=6),
        cost_per_month=cost,
        currency=None if price is None else given.currency,
        steps=tuple(steps),
    )


def _kv_step(
    in_flight: Fraction,
    tokens_in: Fraction,
    tokens_out: Fraction,
    kv_cache: int,
    by_kv: Fraction,
    concurrency_replicas: int,
    busiest: int,
) -> str:
    """Step 3's text: the KV cache all in-flight requests need, and the busiest replica's."""
    whole_in_flight = math.ceil(in_flight)
    kv_needed = math.ceil(whole_in_flight * (tokens_in + tokens_out))
    kv_busiest = math.ceil(busiest * (tokens_in + tokens_out))
    return (
        f"By KV cache: ⌈{_show(in_flight, 1)}⌉ = {whole_in_flight:,} requests × "
        f"({_show(tokens_in)} + {_show(tokens_out)}) tokens = {kv_needed:,} tokens ÷ "
        f"{kv_cache:,} tokens per replica = {_replicas(by_kv)}. On "
        f"{_plural(concurrency_replicas, 'replica')} (by concurrency) the busiest holds "
        f"{_plural(busiest, 'request')} = {kv_busiest:,} tokens: "
        + (
            f"fits in {kv_cache:,}."
            if kv_busiest <= kv_cache
            else f"does not fit in {kv_cache:,}, the KV cache needs more replicas."
        )
    )


def _cost_step(gpus: int, price: Fraction | None, currency: str, cost: Decimal | None) -> str:
    """Step 7's text: the month's cost of the GPUs at the rate card's price, or why none."""
    if price is None or cost is None:
        return "Cost: no rate card prices these GPUs, so no cost."
    return (
        f"Cost: {_plural(gpus, 'GPU')} × {_show(price)} {currency} per GPU-hour × "
        f"{HOURS_PER_MONTH} h a month = {cost:,} {currency} a month."
    )


def _decimal(value: Fraction, places: int) -> Decimal:
    """``value`` rounded half up to ``places`` decimals (with the precision the largest inputs
    need: a cost can have 32 digits before the point)."""
    with localcontext(prec=DECIMAL_DIGITS):
        exact = Decimal(value.numerator) / Decimal(value.denominator)
        return exact.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def _money(value: Fraction, places: int = 2) -> Decimal:
    return _decimal(value, places)


@dataclass(frozen=True)
class Comparison:
    """A plan against what a deployment runs now: ``surplus`` replicas (negative: short),
    their GPUs and their monthly cost at ``price`` (None without a card)."""

    deployed_replicas: int
    needed_replicas: int
    surplus_replicas: int
    surplus_gpus: int
    surplus_cost_per_month: Decimal | None
    currency: str | None
    text: str


def compare(
    deployed: int,
    result: Plan,
    tensor_parallel: int,
    price: Decimal | None,
    currency: str = "",
) -> Comparison:
    """What running ``deployed`` replicas costs against the plan's: "you run 5: 2 more than
    needed, costing 4,380.00 EUR a month"."""
    surplus = deployed - result.replicas
    gpus = surplus * tensor_parallel
    cost = (
        None
        if price is None
        else _money(Fraction(abs(gpus)) * _exact("price", price) * HOURS_PER_MONTH)
    )
    money = "" if cost is None else f"{cost:,} {currency} a month".rstrip()
    if surplus > 0:
        text = f"You run {deployed:,}: {_plural(surplus, 'replica')} more than needed"
        text += f", costing {money}." if money else " (no rate card prices them)."
    elif surplus < 0:
        text = f"You run {deployed:,}: {_plural(-surplus, 'replica')} fewer than needed"
        text += f"; they would cost {money}." if money else " (no rate card prices them)."
    else:
        text = f"You run {deployed:,}: as many as needed."
    return Comparison(
        deployed_replicas=deployed,
        needed_replicas=result.replicas,
        surplus_replicas=surplus,
        surplus_gpus=gpus,
        surplus_cost_per_month=cost,
        currency=None if cost is None else currency,
        text=text,
    )
