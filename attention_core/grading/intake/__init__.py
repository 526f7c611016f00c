"""Taking submissions in: regular files only, zips and notebooks unpacked under bounds, a folder's rule, ids."""
