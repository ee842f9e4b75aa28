"""The schedule layer: the knob registry (:mod:`.knobs`), the :class:`Schedule` value
(:mod:`.schedule`) and the heuristic that completes one from a call's shapes
(:mod:`.heuristics`). Imports only :mod:`dtriton.errors` and the IR."""

from .attention_rules import flash_forward_space
from .conv_rules import conv_space_tiles
from .grad_rules import flash_backward_places, flash_backward_space, mask_bounded
from .heuristics import DECIDED, RULES, complete_schedule, next_pow2, sm_count
from .knobs import (ACC_DTYPES, ACCESS, AUTO_TENSOR_CORE, EVICTIONS, PLACES, PRECISIONS, STAGE_PLACES, SPLIT_MODES, SPLIT_ORDERS, STRATEGIES, TENSOR_CORE_FP32, Domain, FrozenMap,
                    Knob, flat_knobs, knob, knobs, launch_knobs, markdown_table, one_of, register, stage_knobs,
                    unregister)
from .schedule import Schedule, StageSchedule, reject_unknown_keywords, unknown_fields_message
from .shrink import fits_smem, operand_itemsize, shrink, smem_estimate

__all__ = ["shrink", "fits_smem", "operand_itemsize", "smem_estimate", "Schedule", "StageSchedule", "FrozenMap", "Knob", "Domain", "one_of", "register", "unregister", "knob",
           "knobs", "flat_knobs", "stage_knobs", "launch_knobs", "markdown_table", "complete_schedule",
           "sm_count", "next_pow2", "DECIDED", "RULES", "STRATEGIES", "PLACES", "STAGE_PLACES", "SPLIT_MODES", "SPLIT_ORDERS",
           "ACCESS", "EVICTIONS", "PRECISIONS", "TENSOR_CORE_FP32", "AUTO_TENSOR_CORE", "ACC_DTYPES", "reject_unknown_keywords", "unknown_fields_message",
           "flash_backward_places", "flash_backward_space", "flash_forward_space", "conv_space_tiles"]
