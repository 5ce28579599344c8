"""python -m hpu_lab.perfmodel: the validation table and the seed-000 what-if table."""
import sys

from .validation import calibrate, main

if __name__ == "__main__":
    if sys.argv[1:] == ["calibrate"]:
        print(calibrate())
    else:
        main()
