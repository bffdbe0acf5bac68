-- The example's composition: one sandbox (the local sandboxd unless E2B_API_KEY / E2B_API_URL
-- point elsewhere) and the subprocess seam.
plugin "e2b" {}
plugin "subprocess" {}
