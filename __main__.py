"""ml-platform: load and validate the settings, build the platform, export the stack outputs."""

import pulumi

from stacks import platform

for name, value in platform.run().items():
    pulumi.export(name, value)
