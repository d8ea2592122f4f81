"""ASHA whose rungs survive a killed driver.

Ray Tune restores a sweep's trials but not its scheduler's rungs, so a resumed sweep would let the next
trials pass every rung unopposed. On the first result after a (re)start the rungs are refilled from every
trial's metrics.jsonl: the first validation at or past each milestone, the value ASHA recorded there.
(Ray imports this module, with the pickled scheduler, when the sweep resumes.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.tune.schedulers import ASHAScheduler

from llmpipe.tune.results import read_curve


class ResumableASHA(ASHAScheduler):  # type: ignore[misc]
    def __init__(self, trials_dir: Path, metric: str, bytes_per_token: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.trials_dir = trials_dir
        self.curve_metric = metric
        self.bytes_per_token = bytes_per_token
        self.seeded = False

    def seed(self) -> None:
        self.seeded = True
        op = self._metric_op
        assert op is not None  # set from the sweep's metric and mode before any result
        for run in sorted(self.trials_dir.glob("*/metrics.jsonl")):
            curve = read_curve(run.parent, self.curve_metric, self.bytes_per_token)
            for bracket in self._brackets:
                for milestone, recorded in bracket._rungs:  # Ray's rung table: (milestone, {trial: value})
                    reached = [v for step, v in curve if step >= milestone]
                    if reached:
                        recorded.setdefault(run.parent.name, op * reached[0])

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        if not self.seeded:
            self.seed()
        return str(super().on_trial_result(tune_controller, trial, result))
