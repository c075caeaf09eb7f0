from trainers.base import BaseTrainer
from trainers.policy import PolicyTrainer

__all__ = ["BaseTrainer", "PolicyTrainer"]
