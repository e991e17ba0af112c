"""The ``crashpoint`` command."""
import sys
def main(argv: list[str] | None = None) -> int:
    return 0
if __name__ == "__main__":
    sys.exit(main())
