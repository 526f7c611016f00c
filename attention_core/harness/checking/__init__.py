"""Running a check and judging it: inputs made, the reference (or an implementation) called, results compared within tolerance."""
