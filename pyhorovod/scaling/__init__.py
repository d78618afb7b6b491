"""Large-batch science: LR scaling rules and warmup (lr), gradient noise scale (noise_scale, loaded lazily)."""
from pyhorovod.scaling.lr import LinearWarmup, scale_factor, scaled_lr, warmup_multiplier, warmup_steps_from

__all__ = ["LinearWarmup", "scale_factor", "scaled_lr", "warmup_multiplier", "warmup_steps_from"]
