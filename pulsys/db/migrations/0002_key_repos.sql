-- Keys an admin limited to some repos (docs/admin.md, "Keys limited to repos"): the
-- patterns as a JSON list of strings; NULL for a key that reads every repo.
ALTER TABLE api_keys ADD COLUMN repos TEXT;
