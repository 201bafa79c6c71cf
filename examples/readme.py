import flux

d: flux.Dispatcher[dict[str, str]] = flux.Dispatcher()
country = {"name": "?"}


def city_store(action: dict[str, str]) -> None:  # registered first ...
    d.wait_for([country_token])  # ... but runs after country_store
    print("city for", country["name"])  # city for australia


def country_store(action: dict[str, str]) -> None:
    country["name"] = action["country"]


d.register(city_store)
country_token = d.register(country_store)
d.dispatch({"country": "australia"})
