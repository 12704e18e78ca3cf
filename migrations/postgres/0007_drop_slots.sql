-- The fleet-wide slot pool of 0004 served no feature yet (the nix queue of
-- MS-7 will bring its own); it goes until then.
DROP TABLE slots;
