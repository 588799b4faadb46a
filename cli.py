"""The `tokformer` command line: a thin click layer over the library API."""

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tokformer")
def main() -> None:
    """tokformer: one Transformer for every modality."""


if __name__ == "__main__":
    main()
