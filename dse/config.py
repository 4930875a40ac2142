"""Structured configs: the one source of defaults and types for every config group.

Registered in Hydra's ConfigStore as the options of the groups ``net`` (one per zoo network,
plus ``onnx``), ``chromosome``, ``algorithm``, ``algorithm/crossover`` and
``algorithm/mutation``, and as ``base_config``, the schema the primary configs in ``conf/``
extend. Platforms stay YAML files (``conf/platform/``): they describe hardware, not settings.

Classes named by ``_target_`` are looked up only among :data:`ALLOWED_TARGETS`, so a config read
back from a run directory (resume) can never name arbitrary code.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING, OmegaConf

from dse.errors import DseError

_REGISTERED = False
#: Most parts the advanced encoding gives a layer unless ``chromosome.splits`` says otherwise.
ADVANCED_SPLITS = 2
#: How a deployment is measured unless a config says otherwise: warm-up and measured iterations
#: (the thesis: 4 and 20) and the time after which a run is stopped and marked failed.
WARMUP, ITERATIONS, TIMEOUT_S = 4, 20, 600.0


def zoo_names() -> list[str]:
    """The zoo's networks. ``dse.net`` is imported here, not at the top: it brings numba and
    llvmlite, and a rank that reads the measurement defaults above must not load them (their
    library's file pages would go into every rank's memory)."""
    from dse.net.zoo import NETS

    return list(NETS)


def calibration_names() -> list[str]:
    """The networks calibration profiles by default: the zoo and the calibration networks."""
    from dse.net.zoo import CALIBRATION_NETS

    return [*zoo_names(), *CALIBRATION_NETS]


#: The only classes a config may name with ``_target_``.
ALLOWED_TARGETS = frozenset(
    {
        "chromosomes.NaiveChromosome",
        "chromosomes.AdvancedChromosome",
        "chromosomes.VerticalChromosome",
        "pymoo.operators.crossover.sbx.SBX",
        "pymoo.operators.crossover.ux.UniformCrossover",
        "pymoo.operators.crossover.pntx.TwoPointCrossover",
        "pymoo.operators.mutation.pm.PM",
        "dse.search.operators.RandomReset",
    }
)


def target_class(target: str, key: str) -> type:
    """The class ``target`` names, if it is allowed."""
    if target not in ALLOWED_TARGETS:
        raise DseError(
            f"{key}._target_={target!r} is not one of dse's classes: "
            f"choose one of {', '.join(sorted(ALLOWED_TARGETS))}"
        )
    from hydra.utils import get_class  # Hydra: see register()

    return get_class(target)


@dataclass
class NetConfig:
    name: str = MISSING  # a zoo network, or 'onnx' with path
    path: str | None = None  # an ONNX file (+net=onnx net.path=model.onnx)
    input_shape: Any = None  # [1,3,224,224], or {input_name: shape}, for dynamic dimensions
    order: str = "memory"  # memory: memory-aware branch order (seed 002) | file: as stored
    # budget for measuring shapes by running the model (only when static inference cannot)
    measure_mb: float = 4096.0  # address space beyond the weights
    measure_seconds: float = 60.0


@dataclass
class ChromosomeConfig:
    _target_: str = MISSING
    name: str = MISSING
    # most parts a splittable layer gets; None: the encoding's default (advanced:
    # ADVANCED_SPLITS, naive: one gene per device as in Eq. 4.5); vertical splits no layer
    splits: int | None = None
    # a split layer's parts: speed (sized to each device's modelled throughput on that layer,
    # so a fast GPU and a slow CPU finish together; between equal devices, equal parts), or
    # equal (the thesis's rule). speed: lower latency and a larger hypervolume on VGG-16 and
    # AlexNet over the default platform (scripts/uneven_splits.py)
    shares: str = "speed"
    # split layers by rows too (spatial partitioning): one more gene per layer that can split
    # both ways (a convolution), choosing its axis: output channels or output rows. The
    # vertical encoding splits no layer and ignores it
    spatial: bool = False

    def __post_init__(self) -> None:
        if self.splits is not None and self.splits < 1:
            raise DseError(
                f"chromosome.splits={self.splits} must be at least 1 (the most parts a layer is "
                "split into; null: the encoding's default)"
            )
        if self.shares not in ("equal", "speed"):
            raise DseError(f"chromosome.shares={self.shares!r} must be equal or speed")


@dataclass
class OperatorConfig:
    _target_: str = MISSING
    name: str = MISSING
    prob: float = 0.9  # crossover: of mating a pair; mutation: of mutating an offspring
    eta: float | None = None  # SBX and PM distribution index (larger: offspring nearer parents)

    def __post_init__(self) -> None:
        if not 0.0 <= self.prob <= 1.0:
            raise DseError(f"{self.name} prob={self.prob} must be between 0 and 1")
        if self.eta is not None and not self.eta >= 0:
            raise DseError(f"{self.name} eta={self.eta} must be zero or more")

    def build(self, **fixed: Any) -> Any:
        """The pymoo operator, with ``fixed`` keyword arguments (vtype, repair)."""
        cls = target_class(self._target_, self.name)
        kwargs = {"prob": self.prob, **({} if self.eta is None else {"eta": self.eta})}
        return cls(**kwargs, **fixed)


_OPS = "pymoo.operators"
#: algorithm/crossover and algorithm/mutation options.
CROSSOVERS = {
    "sbx": OperatorConfig(f"{_OPS}.crossover.sbx.SBX", "sbx", 0.9, 15.0),
    "uniform": OperatorConfig(f"{_OPS}.crossover.ux.UniformCrossover", "uniform", 0.9),
    "two_point": OperatorConfig(f"{_OPS}.crossover.pntx.TwoPointCrossover", "two_point", 0.9),
}
MUTATIONS = {
    "pm": OperatorConfig(f"{_OPS}.mutation.pm.PM", "pm", 0.9, 20.0),
    "random": OperatorConfig("dse.search.operators.RandomReset", "random", 1.0),
}


#: algorithm.refill options: what fills the offspring slots breeding leaves without a new mapping
#: (dse.search.refill, where each is described and measured).
REFILLS = ("mutation", "immigrants", "restart", "mating")
#: robust options: how an objective is made of its values under the platform's profiles
#: (dse.search.robust combines them).
ROBUST = ("none", "worst", "mean")
#: algorithm.crowding options: how survival cuts the front that does not fit whole
#: (dse.search.nsga2.survive).
CROWDINGS = ("cd", "2nn")


@dataclass
class AlgorithmConfig:
    defaults: list[Any] = field(
        default_factory=lambda: ["_self_", {"crossover": "sbx"}, {"mutation": "pm"}]
    )
    name: str = "nsga2"
    pop_size: int = 1000  # the thesis's settings: 1000 x 100 generations
    n_gen: int = 100
    max_evaluations: int | None = None  # stop once this many distinct mappings were evaluated
    seed_single_device: bool = True  # the first population includes every one-device mapping
    # ... and every splittable layer over the fastest 2, 3, ... devices (chromosomes.seeds)
    seed_structured: bool = False
    # what fills the offspring breeding leaves without a new mapping: escalating mutation of
    # the copies (mutation), random immigrants, a partial restart, or mating again (dse.search
    # .refill; scripts/search_quality.py --refill compares them)
    refill: str = "mutation"
    # share of each generation's offspring made as one move from a member of the current
    # front (a gene, with the genes naming the same device of its layer), the rest bred by
    # crossover and mutation; 0: NSGA-II alone. For small budgets (about 0.5 up to a few
    # thousand evaluations, with pop_size about sqrt(max_evaluations)): dse.search.local,
    # docs/results/search-quality.md
    local_share: float = 0.0
    # how the front that does not fit whole is cut: crowding distance (cd, pymoo's default) or
    # pruning by the two nearest neighbours, one at a time (2nn, pymoo's option: keeps a front
    # of three objectives spread out when it is far larger than the population; costs about
    # the square of that front's size: dse.search.nsga2.nearest_neighbour_pruning)
    crowding: str = "cd"
    checkpoint_every: int = 10  # generations between checkpoints (resume=<run dir>)
    crossover: OperatorConfig = field(default_factory=lambda: CROSSOVERS["sbx"])
    mutation: OperatorConfig = field(default_factory=lambda: MUTATIONS["pm"])

    def __post_init__(self) -> None:
        if self.pop_size < 2:
            raise DseError(
                f"algorithm.pop_size={self.pop_size}: the population needs at least 2 individuals"
            )
        if self.n_gen < 1:
            raise DseError(f"algorithm.n_gen={self.n_gen} must be at least 1")
        if self.max_evaluations is not None and self.max_evaluations < self.pop_size:
            raise DseError(
                f"algorithm.max_evaluations={self.max_evaluations} must be at least "
                f"algorithm.pop_size ({self.pop_size})"
            )
        if self.checkpoint_every < 1:
            raise DseError(f"algorithm.checkpoint_every={self.checkpoint_every} must be at least 1")
        if not 0.0 <= self.local_share <= 1.0:
            raise DseError(f"algorithm.local_share={self.local_share} must be between 0 and 1")
        if self.crowding not in CROWDINGS:
            raise DseError(
                f"algorithm.crowding={self.crowding!r} is not one of {', '.join(CROWDINGS)}"
            )
        if self.refill not in REFILLS:
            raise DseError(f"algorithm.refill={self.refill!r} is not one of {', '.join(REFILLS)}")


@dataclass
class Phase2Config:
    """After the search, deploy and measure mappings under MPI (``python -m dse ...
    phase2.enabled=true``)."""

    enabled: bool = False
    top_k: int = 5  # mappings beyond the best of each objective, spread along the front
    warmup: int = WARMUP  # iterations before measuring
    iterations: int = ITERATIONS  # measured iterations
    timeout_s: float = TIMEOUT_S  # a mapping's run is stopped and marked failed after this long
    stream: int = 0  # frames pushed back to back to measure the pipelined period (0: off)
    keep: bool = False  # keep each deployment's sub-models after measuring

    def __post_init__(self) -> None:
        if self.top_k < 0 or self.warmup < 0 or self.iterations < 1 or self.stream < 0:
            raise DseError(
                "phase2: top_k, warmup and stream must be 0 or more, iterations at least 1"
            )
        if not 0 < self.timeout_s < math.inf:
            raise DseError(
                f"phase2.timeout_s={self.timeout_s} must be a positive number of seconds"
            )


@dataclass
class BaseConfig:
    """Top-level keys of every entry point (the groups come from the defaults lists)."""

    net: NetConfig | None = None
    platform: Any = MISSING
    chromosome: ChromosomeConfig = MISSING
    algorithm: AlgorithmConfig = MISSING
    seed: int = 0
    objectives: list[str] = field(default_factory=lambda: ["latency", "memory", "energy"])
    coefficients: str | None = None  # a coefficients JSON; None: the platform's own
    model_threads: int | None = None  # model threads on large batches; null: all cores if idle
    # plans that hold under the platform's profiles (its profiles: key; the nominal is always
    # one): each objective the worst (largest) of its values under them, or their mean; none:
    # the nominal's, the profiles only shown in the outputs (dse.search.robust)
    robust: str = "none"
    phase2: Phase2Config = field(default_factory=Phase2Config)
    resume: str | None = None  # a run directory to continue from its checkpoint
    progress: bool = True  # progress bar on stderr


@dataclass
class InspectConfig(BaseConfig):
    format: str = "table"  # table | json


@dataclass
class EvaluateConfig(InspectConfig):
    mapping: str | None = None  # AutoDiCE mapping.json: {"<host>_<resource>": [node names]}
    horizontal: str | None = None  # AutoDiCE horizontal.json: {layer: ["lop", points, devices]}


@dataclass
class DeployConfig(BaseConfig):
    """python -m dse.deploy: one mapping -> sub-models + plan (+ measured under MPI)."""

    mapping: str | None = None  # AutoDiCE mapping.json
    horizontal: str | None = None  # AutoDiCE horizontal.json
    out: str | None = None  # the deployment directory
    measure: bool = False  # also run it under mpiexec and write measurements.json
    warmup: int = WARMUP  # iterations run before measuring
    iterations: int = ITERATIONS  # measured iterations
    timeout_s: float = TIMEOUT_S  # the run is stopped and marked failed after this long
    stream: int = 0  # then push this many frames back to back: the pipelined period


@dataclass
class CalibrateConfig(BaseConfig):
    """python -m dse.calibrate: micro-benchmarks on this machine -> a coefficients file.

    The one home of calibration's numbers; ``quick=true`` replaces some with smaller ones
    (:data:`dse.calibrate.settings.QUICK`)."""

    # profiled networks: zoo names and ONNX files (FILE.onnx, or {path: FILE.onnx, input_shape:
    # [1,3,H,W]}); layers of other networks are regressed from theirs
    nets: list[Any] = field(default_factory=calibration_names)
    runs: int = 10  # profiled runs per network (after the warm-up runs)
    warmup: int = 2  # warm-up runs before profiling, and iterations before each deployment's
    channel_repeats: int = 15  # timed rounds of the one-Conv models (the channel block)
    part_repeats: int = 5  # timed rounds of each layer alone as parts and as bands (fixed shares)
    deployments: bool = True  # also measure 4 mappings per net under MPI (memory, cut costs)
    iterations: int = 5  # measured iterations of each such deployment per round (after warm-up)
    rounds: int = 5  # rounds over a net's deployments, each in a random order (interleaved)
    timeout_s: float = TIMEOUT_S  # a deployment's run stopped: the calibration fails
    submodel_runs: int = 3  # timed rounds of each cut mapping's sub-models alone
    quick: bool = False  # few repeats and only the first net: a smoke test, not for predictions
    probe: bool = (
        True  # time the whole net alone beside each deployment run (dse.runtime.launch.probe)
    )
    out: str | None = None  # default: the platform's calibration file (dse.paths)
    # the measurements' journal beside out (dse.calibrate.journal): resume=true goes on with
    # an interrupted calibration's measurements (resume is BaseConfig's key, read as a flag
    # here), refit=true fits them again without measuring
    refit: bool = False


@dataclass
class FidelityConfig(BaseConfig):
    """python -m dse.fidelity: deploy and measure N mappings, predicted against measured."""

    mappings: int = 30  # how many (front bests and spread, then random of every kind)
    warmup: int = 2
    iterations: int = 5  # per round
    # every mapping runs once per round, rounds in random orders (interleaved); one whose
    # rounds' medians lie more than 10 % apart runs one round more at the end
    rounds: int = 5
    keep: bool = False  # keep the sub-models (else only plans and measurements stay)
    probe: bool = True  # time the whole net alone beside each run: the machine's speed drift
    timeout_s: float = TIMEOUT_S
    stream: int = 0  # then push this many frames back to back: the pipelined period (0: off)
    search_pop_size: int = 100  # the short search whose front gives a third of the mappings
    search_generations: int = 30
    out: str | None = None  # default: runs/fidelity/<net>-<platform>-<time>


#: How an emulated cluster's devices get their CPU shares (dse/cluster/cpu.py), the default first.
CPU_SHARES = ("weight", "corunner", "quota")


def check_cpu_share(value: str, where: str = "") -> None:
    """One line unless ``value`` is one of :data:`CPU_SHARES` (``where``: a prefix naming the
    config); the cluster's config and :func:`dse.cluster.spec.parse_spec` both check with it."""
    if value not in CPU_SHARES:
        raise DseError(f"{where}cpu_share={value!r} must be {', '.join(CPU_SHARES)}")


@dataclass
class ClusterConfig:
    """python -m dse.cluster up|status|check|down|set platform=NAME: an emulated cluster on this
    machine (the platform's ``emulation:`` section; see dse/cluster)."""

    platform: Any = None
    name: str | None = None  # the cluster's name; null: the platform's
    check: bool = True  # after up: measure every link and device against the platform
    # how a device gets its CPU share (dse/cluster/cpu.py): weight, the device's cgroup weighs
    # its share (two devices of a CPU computing at once divide it so) and its ranks are paced to
    # it (alone, each run lasts its CPU time over the share); corunner, co-runner processes
    # share each CPU with the device while something runs on its board, so it computes at its
    # share from its first scheduler tick, but a waiting device may wait a time slice more to
    # run; quota, a CFS quota per period, under which a device that computes in bursts shorter
    # than its quota runs at a whole CPU's speed (docs/results/cluster.md compares them)
    cpu_share: str = "weight"
    # CFS period of the devices' CPU quotas, cpu_share=quota only (scripts/cluster_cpu.py,
    # docs/results/cluster.md): shorter periods run slower than the share (the kernel enforces
    # quotas at its scheduler tick), longer ones slower too and with a larger spread
    cfs_period_us: int = 10_000
    check_mb: float = 4.0  # message size of the link checks
    check_reps: int = 5  # repetitions per link (the best counts; the median is shown)
    check_rounds: int = 6  # compute rounds per device
    check_chunk_ms: float = 100.0  # compute per round at a whole CPU (10 CFS periods)
    tolerance: float = 0.10  # a link further than this from its rate is an error
    format: str = "table"  # table | json
    # set (a running cluster, while ranks run on it): the board whose port gets rate_mbit
    board: str | None = None
    rate_mbit: float | None = None  # set: the port's new rate (a shared medium's, board= left out)
    device: str | None = None  # set: the device that gets share
    share: float | None = None  # set: the device's new share of its board's CPUs, in (0, 1]

    def __post_init__(self) -> None:
        if self.check_mb <= 0 or self.check_reps < 1 or self.check_rounds < 1:
            raise DseError("cluster: check_mb must be positive, check_reps and check_rounds >= 1")
        check_cpu_share(self.cpu_share, "cluster: ")
        if not self.check_chunk_ms > 0 or not 0 < self.tolerance < 1:
            raise DseError("cluster: check_chunk_ms must be positive and tolerance in (0, 1)")


def check(cfg: Any) -> None:
    """The checks a composed config must pass beyond its types (one line each)."""
    from dse.objectives import check_objectives

    for group in ("algorithm", "chromosome", "phase2"):  # their schemas' __post_init__ checks
        if group in cfg:
            OmegaConf.to_object(cfg[group])
    if cfg.get("model_threads") is not None and cfg.model_threads < 1:
        raise DseError(
            f"model_threads={cfg.model_threads} must be 1 or more (or null: every core when "
            "the machine is idle, else 1)"
        )
    if cfg.get("net") is not None:
        for key in ("measure_mb", "measure_seconds"):
            value = cfg.net.get(key)
            if value is not None and not value > 0:  # also catches nan
                raise DseError(f"net.{key}={value} must be a positive number")
    if cfg.get("robust") is not None and cfg.robust not in ROBUST:
        raise DseError(f"robust={cfg.robust} must be one of {', '.join(ROBUST)}")
    if "seed" in cfg and not 0 <= int(cfg.seed) < 2**32:
        raise DseError(f"seed={cfg.seed} must be a whole number from 0 to 2^32 - 1")
    if "objectives" in cfg:
        objectives = cfg.objectives
        check_objectives(list(objectives) if OmegaConf.is_list(objectives) else objectives)


def register() -> None:
    """Register the structured configs with Hydra (once per process; the entry points do it
    through :func:`dse.cli.run` before Hydra composes a config).

    Not done on import, and Hydra is imported here, not at the top: a rank of a deployment
    reads the measurement defaults above, and importing Hydra would be most of what importing
    this module costs it."""
    global _REGISTERED
    if _REGISTERED:
        return
    _REGISTERED = True
    # ${pid:} in run directory names: two runs started in the same second get two directories
    OmegaConf.register_new_resolver("pid", os.getpid, replace=True)
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="base_config", node=BaseConfig)
    cs.store(name="base_inspect", node=InspectConfig)
    cs.store(name="base_evaluate", node=EvaluateConfig)
    cs.store(name="base_deploy", node=DeployConfig)
    cs.store(name="base_calibrate", node=CalibrateConfig)
    cs.store(name="base_fidelity", node=FidelityConfig)
    cs.store(name="base_cluster", node=ClusterConfig)
    for name in zoo_names():
        cs.store(group="net", name=name, node=NetConfig(name=name))
    cs.store(group="net", name="onnx", node=NetConfig(name="onnx", path=MISSING))
    for name, cls, splits in (
        ("naive", "NaiveChromosome", None),
        ("advanced", "AdvancedChromosome", ADVANCED_SPLITS),
        ("vertical", "VerticalChromosome", None),
    ):
        node = ChromosomeConfig(_target_=f"chromosomes.{cls}", name=name, splits=splits)
        cs.store(group="chromosome", name=name, node=node)
    cs.store(group="algorithm", name="nsga2", node=AlgorithmConfig)
    for group, options in (("crossover", CROSSOVERS), ("mutation", MUTATIONS)):
        for name, operator in options.items():
            cs.store(group=f"algorithm/{group}", name=name, node=operator)
