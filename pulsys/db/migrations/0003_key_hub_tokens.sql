-- Keys that carry their owner's Hugging Face token (--upstream-auth client with
-- --auth required, docs/decisions/0017): the token sealed by auth/sealed.py
-- (AES-256-GCM under --token-secret-file, bound to the key id); NULL for none.
ALTER TABLE api_keys ADD COLUMN hub_token TEXT;
