"""A support agent judged on conversations: scripted turns, a user function, a simulated user."""

from agent_health import Stop, expect, simulated_user, test


@test("asks for the order number before it answers", labels=["user:scripted"])
async def scripted(agent):
    result = await agent.run("Where is my parcel?", turns=["It is order 1234", "thanks"])
    expect(result.turn(1)).not_to_have_called_tool("lookup_order")
    expect(result).to_have_asked_for(r"order number")
    expect(result.turn(2)).to_have_called_tool("lookup_order", {"order_id": "1234"})
    expect(result.turn(2).output).to_contain("arrives on Thursday")
    expect(result).to_finish_within_turns(3)
    expect(result.output).to_contain("Goodbye")


@test("a user function stops when it has its answer", labels=["user:function"])
async def user_function(agent):
    def customer(conversation):
        if "order number" in conversation.last_output:
            return "It is 9012"
        if "ships next week" in conversation.last_output:
            return Stop.goal_met("knows when it ships")
        return Stop.gave_up("the agent did not say when it ships")

    result = await agent.run("When does my order ship?", user=customer, max_turns=4)
    expect(result).to_meet_user_goal()
    expect(result).to_finish_within_turns(2)


customer = simulated_user(
    goal="find out whether the refund for my order went through",
    persona="a busy customer who writes short messages",
    facts={"order number": "5678"},
    stop_when="the agent says what happened to the refund, or clearly cannot help",
    max_turns=5,
)


@test("a simulated customer learns its refund status", labels=["user:simulated"])
async def simulated(agent):
    result = await agent.run("Hi, did my refund go through?", user=customer)
    expect(result).to_meet_user_goal()
    expect(result).to_have_asked_for(r"order number")
    expect(result).to_have_called_tool("lookup_order", {"order_id": "5678"})
    expect(result).to_finish_within_turns(3)
