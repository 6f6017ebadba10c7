"""The layered layout's orchestrator (`python -m stacks.orchestrate`): stacks on Pulumi's Automation API
(`workspace`), the layers and their shared `--parallel` budget (`layers`)
and the migration from one stack (`migrate`). What crosses between stacks, and the digest that marks a node
group stale, are stacks/layers.py's."""
