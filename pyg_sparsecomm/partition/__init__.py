from .methods import METHODS, register
from .partitioner import SparsityAwarePartitioner

__all__ = ["METHODS", "register", "SparsityAwarePartitioner"]
