"""The pretraining objectives by name (`ElectraConfig.objective`); see `base.Objective`.

Adding one: a file with an `Objective` subclass, and its line below.
"""

from electra_tf.errors import check_choice
from electra_tf.pretraining.objectives.all_tokens_mlm import AllTokensMlm
from electra_tf.pretraining.objectives.base import Objective
from electra_tf.pretraining.objectives.electra import Electra
from electra_tf.pretraining.objectives.electra_15 import Electra15
from electra_tf.pretraining.objectives.mlm import Mlm
from electra_tf.pretraining.objectives.replace_mlm import ReplaceMlm

OBJECTIVES = {objective.name: objective for objective in (
    Electra(),
    Mlm(),
    Electra15(),
    ReplaceMlm(),
    AllTokensMlm(),
)}


def get(name: str) -> Objective:
    """The objective called `name`; ConfigError listing the names when there is none."""
    check_choice("objective", name, OBJECTIVES)
    return OBJECTIVES[name]


def of(config) -> Objective:
    """The objective of `config`, checked against the config's other settings."""
    objective = get(config.objective)
    objective.validate(config)
    return objective
