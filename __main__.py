"""ml-platform: load and validate the settings, build the platform, export the stack outputs."""

import os

import pulumi

from settings.config_file import STACK_FILE_ENV
from stacks import platform

# Settings problems name the line of Pulumi.<stack>.yaml (the CLI runs the program in the project directory).
os.environ.setdefault(STACK_FILE_ENV, f"Pulumi.{pulumi.get_stack()}.yaml")

for name, value in platform.run().items():
    pulumi.export(name, value)
