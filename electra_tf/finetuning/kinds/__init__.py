"""The fine-tuning task kinds by name; see `base.TaskKind`.

Adding one: a file with a `TaskKind` subclass, and its line below.
"""

from electra_tf.errors import check_choice
from electra_tf.finetuning.kinds.base import TaskKind
from electra_tf.finetuning.kinds.classification import Classification
from electra_tf.finetuning.kinds.qa import QuestionAnswering
from electra_tf.finetuning.kinds.regression import Regression
from electra_tf.finetuning.kinds.tagging import Tagging

KINDS = {kind.name: kind for kind in (
    Classification(),
    Regression(),
    Tagging(),
    QuestionAnswering(),
)}


def get(name: str) -> TaskKind:
    check_choice("task kind", name, KINDS)
    return KINDS[name]
