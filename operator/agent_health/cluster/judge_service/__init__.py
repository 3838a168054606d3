"""The operator's judge service: each live cell judged with its own RunSpec's judge."""
