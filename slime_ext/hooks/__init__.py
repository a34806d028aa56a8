"""Slime hooks: the same capture, judging and learning run inside an unmodified Slime.

Dotted paths for Slime's flags (each matches ``../shared/slime-contract.md``):

  --rollout-function-path             slime_ext.hooks.rollout.live_rollout
  --custom-reward-post-process-path   slime_ext.hooks.reward.post_process_rewards
  --custom-rm-path                    slime_ext.hooks.reward.known_reward (known_rewards with --group-rm)
  --loss-type custom_loss --custom-loss-function-path slime_ext.hooks.loss.openclaw_loss
                                      (every method and distillation kind: the settings say which)
  --custom-config-path FILE.yaml      our settings under one key, ``openclaw_rl:`` (see ``config.py``)

The agent settings (Track 2; ``openclaw_rl_env:`` in the config, see ``generate.py``):

  --custom-generate-function-path     slime_ext.hooks.generate.generate (one episode per sample)
  --dynamic-sampling-filter-path      slime_ext.hooks.filters.drop_constant_groups (drop constant-reward groups)
  --rollout-function-path             slime_ext.hooks.sft.generate_rollout, with --loss-type sft_loss and
                                      --prompt-data DEMOS.jsonl --input-key tokens (the warm start)

Nothing here imports Slime, SGLang, Megatron or Ray at module level: each is imported inside the
function that needs it, so every hook imports and runs on a CPU machine without them.
"""
