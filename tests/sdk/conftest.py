"""What test files import: `test`, fixtures, matchers, judges, results, parametrize, config."""
