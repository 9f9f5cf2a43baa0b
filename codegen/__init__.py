"""The nvshmem-dsl generator: spec/*.yaml -> typed model -> expanded operations -> generated/.

Pipeline (one module per step):
  schema.py  checks each YAML file against spec/schema.yaml (errors name file, entry, field)
  model.py   the typed, DSL-agnostic model (dataclasses)
  load.py    builds the model from the validated YAML
  expand.py  expands every family over its axes into concrete operations
  emit/      one small emitter per target, each rendering Jinja templates
  main.py    `python -m codegen generate|check`
"""
