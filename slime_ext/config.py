"""One typed settings object for serving and learning: ``ServeConfig``. The CLI flags, a YAML file
(``--config``) and Slime's ``openclaw_rl:`` mapping all map onto it by the settings' flat keys; its
learning settings are ``LearningConfig``'s (``learning/settings.py``), inherited, and every setting is
declared once (``slime_ext.settings``), never as scattered env reads."""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slime_ext.chat.memory import PLACEMENTS as MEMORY_PLACEMENTS
from slime_ext.engines.device import check_device_spec
from slime_ext.learning.settings import BUILTIN_POLICY_LOSS, LearningConfig
from slime_ext.models.generation import CHOICES as SAMPLING_SOURCES
from slime_ext.settings import Driver, check_choices, flat_keys, from_mapping, setting

if TYPE_CHECKING:
    from slime_ext.trainers.loop import TrainerConfig

SERVING, JUDGING = "serving", "judging"
EMBEDDED = Driver.EMBEDDED
SGLANG_SERVES = "on Slime its SGLang engines serve (Slime's --sglang-* flags)"
EPHEMERAL_MARKERS = ("<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>",)  # OpenClaw's own context blocks (docs/sessions.md)
BUILTIN_JUDGES = ("heuristic", "self", "openai", "off")
LOG_LEVELS = ("debug", "info", "warning", "error")
MODEL_ALIAS = "policy"  # the name every server answers to besides its own model's (/v1/models lists both)
RUNS_ROOT = "runs"  # where a serve without --run-dir records (runs/<timestamp>), and records looks by default


@flat_keys
@dataclass
class ServeConfig(LearningConfig):
    model: str = setting("smollm2-135m", "built-in name (smollm2-135m, tiny), a local HF checkpoint directory, a "
                                         ".gguf file, or a Hugging Face hub id (org/name[@revision]: from the HF "
                                         "cache, downloaded when online)", group=SERVING)
    host: str = setting("127.0.0.1", "address to bind; 0.0.0.0 exposes it: set --api-key then", group=SERVING)
    port: int = setting(30000, "port", group=SERVING)
    run_dir: str = setting("", "where records go; reuse one to resume", group=SERVING, shown="runs/<timestamp>")
    api_key: str = setting("", "require this bearer key (also $OPENCLAW_RL_API_KEY, $SGLANG_API_KEY)", group=SERVING)
    # per-user API keys {user name: key}: the --user-key NAME=KEY flag (cli.py), or user_keys: in YAML
    user_keys: dict[str, str] = setting(help="per-user API keys: {user name: key}", factory=dict, flag="",
                                        group=SERVING)
    served_model_name: str = setting("", "model id reported by /v1/models (beside the alias policy) and in responses",
                                     group=SERVING, shown="the --model value")
    dtype: str = setting("auto", "engine dtype: auto, bfloat16 or float32; auto: bfloat16 where it is native (a CPU "
                                 "with AVX-512 BF16 or AMX, packed: about 2x faster; CUDA), float32 elsewhere (one "
                                 "stream of a 4-bit checkpoint still reads its int4 weights); the "
                                 "trainer re-scores what it learns from in float32 either way; the start-up log says "
                                 "which and why", group=SERVING, drivers=EMBEDDED,
                         slime=SGLANG_SERVES, choices=("auto", "bfloat16", "float32"))
    device: str = setting("auto", "where the engine and the trainer compute: auto (the first CUDA GPU, else the CPU), "
                                  "cpu, cuda or cuda:N; a GPU that is not there is refused at once", group=SERVING,
                          drivers=EMBEDDED, slime=SGLANG_SERVES)
    engine: str = setting("local", "who serves: local (the embedded engine) or sglang (an SGLang server at "
                                   "--sglang-url on the same model, started with --enable-lora; each trained LoRA "
                                   "version is loaded into it in place)", group=SERVING, drivers=EMBEDDED,
                          slime=SGLANG_SERVES, choices=("local", "sglang"))
    sglang_url: str = setting("", "the SGLang server's address, e.g. http://127.0.0.1:30001 (with --engine sglang; "
                                  "its API key from $SGLANG_API_KEY)", group=SERVING, drivers=EMBEDDED,
                              slime=SGLANG_SERVES)
    threads: int = setting(0, "torch threads of the engine and, on the CPU, of the trainer beside it; 0: one per core "
                              "(os.cpu_count()), learning on or off: the trainer computes at idle priority on the "
                              "cores the engine leaves, and after 10 s without any the engine lends it "
                              "--trainer-share of its time", group=SERVING, shown="0",
                           drivers=EMBEDDED, slime=SGLANG_SERVES)
    trainer_share: float = setting(0.25, "the share of the cores the trainer gets when continuous serving has left "
                                         "it none for 10 s (the engine rests that fraction of its time until the "
                                         "step is done); 0: the trainer only computes on cores serving leaves",
                                   group=SERVING, drivers=EMBEDDED, slime=SGLANG_SERVES)
    max_batch_size: int = setting(32, "sequences decoded together", group=SERVING, drivers=EMBEDDED,
                                  slime=SGLANG_SERVES)
    prefix_cache_tokens: int = setting(32768, "prompt KV kept for reuse across requests, in tokens; 0: off",
                                       group=SERVING, drivers=EMBEDDED, slime=SGLANG_SERVES)
    context_length: int = setting(0, "cap the context below the model's own; 0: the model's own", group=SERVING,
                                  drivers=EMBEDDED, slime="the context is the SGLang engines' (--rollout-max-context-len)")
    context_overflow: str = setting("trim", "a prompt past the context: trim (cut the middle of the longest system "
                                            "message, keep the conversation; the response says how many tokens in "
                                            "X-OpenClaw-RL-Prompt-Tokens-Cut) or error (400 context_length_exceeded)",
                                    group=SERVING, choices=("trim", "error"))
    memory: str = setting("on", "the preference memory: on serves each user's requests with their standing "
                                "preferences (\"from now on ...\"; where --memory-placement says), and the trainer "
                                "learns them into the weights from those turns (context distillation); a request's "
                                "X-OpenClaw-RL-Memory: off serves it without (chat/memory.py)", group=SERVING,
                          choices=("on", "off"))
    memory_placement: str = setting("system", "where the preference memory goes: a block at the end of the system "
                                              "message (system) or of the latest user message (user), or the "
                                              "trainer's hint block at the end of the latest user message (hint)",
                                    group=SERVING, choices=MEMORY_PLACEMENTS)
    memory_opening: str = setting("on", "an opening a user quoted in a standing preference (\"start every answer with "
                                        "'So,'\") is written as the first words of their answers, and the model "
                                        "continues after it; off: it is only in the memory block (chat/memory.py: "
                                        "opening)", group=SERVING, choices=("on", "off"))
    max_tokens_cap: int = setting(1024, "most new tokens per response", group=SERVING)
    default_max_tokens: int = setting(512, "new tokens when a request names none (smollm2-135m: of its replies to "
                                           "open prompts that do not loop, 232 of 235 end within 512, 224 within "
                                           "448: bench/reply_length.py)", group=SERVING)
    repetition_stop: str = setting("on", "end a reply that has fallen into a loop: a passage of up to 256 tokens said "
                                         "twice in a row, token for token, at least 128 tokens repeated; the client "
                                         "sees finish_reason length, the recorded turn says repetition "
                                         "(smollm2-135m looped in 165 of 400 replies to open prompts, the stop ended "
                                         "145 of them: chat/repetition.py)", group=SERVING, choices=("on", "off"))
    sampling_defaults: str = setting("model", "temperature / top_p of a request that names none: the model's "
                                              "generation_config.json (smollm2-135m: 0.2 / 0.9), or OpenAI's 1.0 / 1.0",
                                     group=SERVING, choices=SAMPLING_SOURCES)
    max_body_mb: float = setting(8.0, "largest request body", group=SERVING)
    # HTTP hardening (docs/security.md)
    header_timeout_s: float = setting(10.0, "close a connection whose request line and headers have not all arrived "
                                            "this long after they began", group=SERVING)
    body_timeout_s: float = setting(60.0, "answer 408 and close when a request body has not all arrived this long "
                                          "after its headers", group=SERVING)
    keepalive_timeout_s: float = setting(75.0, "close idle keep-alive connections after this", group=SERVING)
    max_connections: int = setting(1000, "open connections at most; past it a new one closes the longest-waiting "
                                         "idle one", group=SERVING)
    allowed_origins: list[str] = setting(help="a web origin (scheme://host[:port]) whose pages may call the API "
                                              "(repeatable); requests with any other Origin header get a 403",
                                         factory=list, group=SERVING, flag="--allowed-origin", metavar="ORIGIN",
                                         append=True, shown="none")
    allowed_hosts: list[str] = setting(help="a Host header name accepted besides loopback ones while bound to "
                                            "loopback, e.g. a reverse proxy's (repeatable)", factory=list,
                                       group=SERVING, flag="--allowed-host", metavar="HOST", append=True, shown="none")
    session_idle_timeout_s: float = setting(1800.0, "close sessions idle this long", group=SERVING)
    max_open_sessions: int = setting(10000, "sessions held in memory at most", group=SERVING, flag="")
    ephemeral_markers: list[str] = setting(help="text that marks a message as the client's own context, not the "
                                                "user's (sessions/)", factory=lambda: list(EPHEMERAL_MARKERS),
                                           group=SERVING, flag="")
    log_level: str = setting("info", "how much the log says", group=SERVING, drivers=EMBEDDED,
                             slime="Slime configures the logging of its processes", choices=LOG_LEVELS)
    status_interval_s: float = setting(5.0, "seconds between status-line updates (a log line when not on a "
                                            "terminal); 0: off", group=SERVING, drivers=EMBEDDED,
                                       slime="the status line is openclaw-rl serve's")
    judge: str = setting("heuristic", "how next states are judged: heuristic (a lexical classifier), self (the "
                                      "served model with its adapter disabled), openai (an OpenAI-compatible model), "
                                      "off, or your own backend as module:attr (docs/extending.md)", group=JUDGING,
                         metavar="JUDGE")
    judge_url: str = setting("", "OpenAI-compatible endpoint of the judge model (with --judge openai)", group=JUDGING)
    judge_model: str = setting("", "model name to ask the judge endpoint for", group=JUDGING)
    judge_key: str = setting("", "API key of the judge endpoint (also $OPENCLAW_RL_JUDGE_KEY); never logged",
                             group=JUDGING)
    judge_votes: int = setting(0, "votes per turn, majority wins; 0: the backend's default", group=JUDGING,
                               shown="3 for model judges, 1 heuristic")
    judge_timeout_s: float = setting(60.0, "a vote slower than this abstains", group=JUDGING)
    judge_concurrency: int = setting(4, "judge calls in flight at once", group=JUDGING)

    def trainer_config(self) -> TrainerConfig:
        """The trainer's settings: the learning settings as they are (sections included)."""
        from slime_ext.trainers.loop import TrainerConfig

        return TrainerConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(LearningConfig)})

    def resolved_run_dir(self) -> Path:
        return Path(self.run_dir or os.path.join(RUNS_ROOT, time.strftime("%Y%m%d-%H%M%S")))

    def api_keys(self) -> tuple[str, ...]:
        key = self.api_key or os.environ.get("OPENCLAW_RL_API_KEY") or os.environ.get("SGLANG_API_KEY") or ""
        return (key,) if key else ()

    @classmethod
    def from_mapping(cls, data: dict[str, Any], source: str) -> ServeConfig:
        """The settings of ``data`` (flat keys, as YAML and Slime give them), validated."""
        return from_mapping(cls, data, source).validated()

    def validated(self) -> ServeConfig:
        """Return self, or raise ValueError naming the setting that cannot work."""
        self._validate_plugins()
        if self.judge == "openai" and (not self.judge_url or not self.judge_model):
            raise ValueError("judge openai needs judge_url and judge_model (--judge-url, --judge-model)")
        self.validate()  # every learning setting, named (LearningConfig.validate)
        if self.judge == "self" and self.learns and self.lora_rank <= 0:
            raise ValueError("judge self needs LoRA training (--lora-rank > 0): the frozen judge is the base model "
                             "with the adapter disabled, and full-weight training leaves no frozen base; use "
                             "--judge openai with a separate judge server, or --judge heuristic")
        if self.judge_concurrency < 1:
            raise ValueError(f"judge_concurrency must be at least 1, got {self.judge_concurrency}")
        if not isinstance(self.user_keys, dict) or not all(isinstance(k, str) and isinstance(v, str) and k and v
                                                           for k, v in self.user_keys.items()):
            raise ValueError("user_keys must map user names to non-empty API keys")
        check_device_spec(self.device)
        check_choices(self)
        self._validate_engine()
        self._validate_http()
        return self

    def _validate_engine(self) -> None:
        """``engine: sglang`` needs its URL, and LoRA training (SGLang loads adapters, not whole weights); the
        trainer's share of the cores is a fraction below 1 (at 1 the engine would rest forever)."""
        if not 0.0 <= self.trainer_share < 1.0:
            raise ValueError(f"trainer_share must be at least 0 and below 1 (a fraction of the cores), "
                             f"got {self.trainer_share}")
        if self.engine == "sglang" and not self.sglang_url.startswith(("http://", "https://")):
            raise ValueError("engine sglang needs sglang_url, the SGLang server's http:// address (--sglang-url)")
        if self.engine == "sglang" and self.learns and self.lora_rank <= 0:
            raise ValueError("engine sglang trains LoRA adapters (it loads them into SGLang in place): lora_rank "
                             "must be > 0")

    def _validate_plugins(self) -> None:
        """Built-in judge and policy loss, or the user's that load (``slime_ext.plugins``: the error says why not)."""
        from slime_ext.plugins import check_choice

        check_choice(self.judge, "judge", BUILTIN_JUDGES, "it must make the backend from the settings")
        check_choice(self.policy_loss, "loss", (BUILTIN_POLICY_LOSS,), "it is called like algorithms/ppo.py's policy_loss")

    def _validate_http(self) -> None:
        from slime_ext.api.policy import normalize_origin

        for name in ("header_timeout_s", "body_timeout_s", "keepalive_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_connections < 16:
            raise ValueError(f"max_connections must be at least 16, got {self.max_connections}")
        for name in ("allowed_origins", "allowed_hosts"):
            value = getattr(self, name)
            if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
                raise ValueError(f"{name} must be a list of non-empty strings")
        for origin in self.allowed_origins:
            normalize_origin(origin)  # raises ValueError naming the origin


def load_yaml(path: str) -> dict[str, Any]:
    import yaml

    with open(path) as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of settings")
    return {k.replace("-", "_"): v for k, v in data.items()}
