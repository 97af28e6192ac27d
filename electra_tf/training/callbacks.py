"""Keras callbacks of a training run: checkpoints on a schedule and on SIGTERM (never of a
state a non-finite loss damaged), an exact last step, and the training FLOPs in
TensorBoard.

`tf.train.CheckpointManager` writes the data files first and then swaps the small
`checkpoint` index file by rename, so an interrupted save leaves the previous checkpoint
as the latest one; nothing is ever half-written under a name the index points to.
"""

import math
import signal

import keras
import tensorflow as tf

from electra_tf.errors import UserError


class NonFiniteLoss(UserError):
    """Training stopped at the first step whose loss was NaN or infinite; nothing after the
    last good checkpoint was saved."""

    def __init__(self, step: int, checkpoint, fix: str):
        kept = (f"the last good checkpoint {checkpoint} is kept" if checkpoint else
                "nothing was saved")
        super().__init__(f"The loss became NaN or infinite at step {step}; {kept}. {fix}")
        self.step, self.checkpoint = step, checkpoint


def is_finite_loss(logs) -> bool:
    return math.isfinite(float((logs or {}).get("loss", 0.0)))


class CheckpointEvery(keras.callbacks.Callback):
    """Saves every `every` optimizer steps and at the end of training, but never a state
    that a non-finite loss (fp16 overflow, a learning rate too high) has damaged: at the
    first such step it stops `fit` and records the step in `non_finite_step`."""

    def __init__(self, manager: tf.train.CheckpointManager, every: int):
        super().__init__()
        self.manager = manager
        self.every = every
        self.last_saved = None
        self.non_finite_step = None

    def _step(self):
        return int(self.model.optimizer.iterations.numpy())

    def save(self):
        step = self._step()
        if step != self.last_saved and self.non_finite_step is None:
            self.manager.save(checkpoint_number=step)
            self.last_saved = step

    def on_train_batch_end(self, batch, logs=None):
        if not is_finite_loss(logs):
            self.non_finite_step = self._step()
            self.model.stop_training = True
        elif self._step() % self.every == 0:
            self.save()

    def on_train_end(self, logs=None):
        self.save()


class StepsProgbar(keras.callbacks.ProgbarLogger):
    """Keras's progress bar with each `fit` epoch (a pretraining run's checkpoint interval)
    headed by the optimizer steps it spans, "Steps 50-100 of 200", not "Epoch 2/4"."""

    def __init__(self, steps_per_epoch: int, last_step: int):
        super().__init__()
        self.steps_per_epoch, self.last_step = steps_per_epoch, last_step

    def on_epoch_begin(self, epoch, logs=None):
        first = epoch * self.steps_per_epoch
        if self.verbose:
            print(f"Steps {first}-{min(first + self.steps_per_epoch, self.last_step)} of "
                  f"{self.last_step}", flush=True)
        epochs, self.epochs = self.epochs, 1  # Keras heads an epoch when there are several
        super().on_epoch_begin(epoch, logs)
        self.epochs = epochs


class StopAtStep(keras.callbacks.Callback):
    """Ends `fit` once the optimizer has taken `last_step` steps (epochs may not divide it)."""

    def __init__(self, last_step: int):
        super().__init__()
        self.last_step = last_step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) >= self.last_step:
            self.model.stop_training = True


class Preempted(Exception):
    """Training stopped on SIGTERM after saving `checkpoint` at `step`."""

    def __init__(self, step: int, checkpoint: str):
        super().__init__(f"Stopped by SIGTERM at step {step}; saved {checkpoint}. Run the "
                         "same command again to resume from it.")
        self.step, self.checkpoint = step, checkpoint


class SaveOnPreemption(keras.callbacks.Callback):
    """On SIGTERM, saves a checkpoint after the current step and stops `fit`.

    TensorFlow's `PreemptionCheckpointHandler` installs the signal handler and, with
    several workers, agrees with the others on the step to save at (through the
    coordination service), so every worker joins the same collective save. Its default
    exit (`sys.exit` inside `fit`) would skip the caller's clean-up; ours sets a flag.
    Create it in the strategy's scope; it restores `manager`'s latest checkpoint. Call
    `close` when training ends: TensorFlow never uninstalls its SIGTERM handler, which
    would leave the rest of the process (fine-tuning after pretraining, say) unstoppable
    by SIGTERM.
    """

    def __init__(self, manager: tf.train.CheckpointManager, strategy):
        super().__init__()
        self.preempted = False
        self._previous_sigterm_handler = signal.getsignal(signal.SIGTERM)
        self.handler = tf.distribute.experimental.PreemptionCheckpointHandler(
            getattr(strategy, "cluster_resolver", None), manager,
            termination_config=tf.distribute.experimental.TerminationConfig(
                exit_fn=self._stop))

    def _stop(self):
        self.preempted = True

    def close(self):
        """Puts back the SIGTERM handler the process had before this callback."""
        signal.signal(signal.SIGTERM, self._previous_sigterm_handler)

    def on_train_batch_end(self, batch, logs=None):
        self.handler.save_checkpoint_if_preempted(
            checkpoint_number=int(self.model.optimizer.iterations.numpy()))
        if self.preempted:
            self.model.stop_training = True


class LogTrainFlops(keras.callbacks.Callback):
    """Writes the training FLOPs done so far (`train_flops`) to TensorBoard, by step, so
    runs of different objectives or sizes can be compared at equal compute."""

    def __init__(self, log_dir: str, flops_per_step: float, every: int):
        super().__init__()
        self.writer = tf.summary.create_file_writer(log_dir)
        self.flops_per_step, self.every = flops_per_step, every

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step % self.every == 0:
            with self.writer.as_default():
                tf.summary.scalar("train_flops", step * self.flops_per_step, step=step)

    def on_train_end(self, logs=None):
        self.writer.flush()
