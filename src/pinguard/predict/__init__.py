"""Predicting a Dockerfile's build before anyone builds it (``pinguard predict``).

The chain: the Dockerfile parser and the pip/uv command-line reader (`pinguard.buildfile`),
the audited state of each stage's ``FROM`` image (`base`: the normal audit, with its caches),
the walk over stages and instructions in build order (`walk`: ``ARG``/``ENV``/``WORKDIR``/
``USER``, ``COPY`` of requirement files from the build context, ``COPY --from`` of whole
environments), and each ``RUN``'s commands (`run`: pip and uv installs answered by the
resolver ``pinguard plan`` uses, uninstalls, new virtual environments; which environment a
command acts on is `interpreters`'; pip's requirement files are `reqfiles`'). Every step is
then diffed by `pinguard.audit.diff` exactly as the audit diffs a built one, into the audit's
own ``AuditResult``, so the policy and every report format judge it unchanged. What cannot be
modelled is an ``unpredicted`` step with its reason, never a guess.
"""

from __future__ import annotations

from pinguard.predict.walk import PredictOptions, predict_dockerfile

__all__ = ["PredictOptions", "predict_dockerfile"]
